package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	api "github.com/capsule-host/capsule-host/client"
)

// FuzzDecodeBody is the HTTP API's body parser (decodeBody) over each
// request type it decodes: any body is either accepted, with valid UTF-8
// and one JSON value, or refused with a 4xx carrying the error body and
// code invalid-request — never a panic, never a 5xx.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"capsule":"shell","tool":"run_shell_command","principal":"alice","input":{"command":"ls"}}`,
		`{"grace_ms":100}`, `{}`, `{"capsule":"a"} {"x":1}`, "{\"capsule\":\"\xff\"}", `[`, ``, `{"unknown":1}`,
	} {
		f.Add(uint8(0), []byte(s))
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		var v any
		switch kind % 3 {
		case 0:
			v = &api.CallRequest{}
		case 1:
			v = &api.StopRequest{}
		default:
			v = &api.ReloadRequest{}
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/call", bytes.NewReader(body))
		ok := decodeBody(w, r, 4096, "body", v)
		if ok {
			if !utf8.Valid(body) || len(body) > 4096 {
				t.Fatalf("accepted %q", body)
			}
			return
		}
		if w.Code < 400 || w.Code >= 500 {
			t.Fatalf("refused %q with status %d", body, w.Code)
		}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code != string(api.CodeInvalidRequest) {
			t.Fatalf("refusal of %q: body %q (%v)", body, w.Body.Bytes(), err)
		}
	})
}

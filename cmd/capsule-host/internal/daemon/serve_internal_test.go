package daemon

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An idle keep-alive connection is closed by the server: a client that
// connects and then sends nothing must not hold a descriptor forever.
func TestIdleConnectionIsClosed(t *testing.T) {
	old := idleTimeout
	idleTimeout = 100 * time.Millisecond
	defer func() { idleTimeout = old }()
	l, err := ListenSocket(filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), context.Background())
	go srv.Serve(l)
	defer srv.Close()

	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Now idle: the server must hang up well before our 3s read deadline.
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection still open after the idle timeout: read returned %v", err)
	}
}

// A call body over the limit is refused as too large (413), not misreported
// as malformed JSON because the reader cut it short.
func TestCallBodyTooLarge(t *testing.T) {
	s := &Server{stopping: make(chan struct{})}
	body := `{"capsule":"c","tool":"t","input":"` + strings.Repeat("a", maxBody) + `"}`
	req := httptest.NewRequest("POST", "/v1/call", strings.NewReader(body))
	rec := httptest.NewRecorder()
	s.call(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "exceeds") {
		t.Fatalf("status %d, body %s", rec.Code, rec.Body.String())
	}
}

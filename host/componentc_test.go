package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/registry"
)

const ccapManifest = `
[imports]
"capsule:process" = "1.1"

[capabilities]
exec = ["/bin/sh"]
allow_persistent = true
backend = "local"

[pool]
min_idle = 1
max = 2
`

// buildCCapsule is the README's C recipe: clang for wasm32-wasi, then
// jco's componentEmbed + componentNew with the reactor adapter.
func buildCCapsule(t testing.TB) string {
	return componenttest.BuildC(t, filepath.Join(componenttest.Dir(), "..", "ccap", "capsule.c"), "capsule:guest/capsule")
}

// TestCComponent: a C capsule with hand-written Canonical ABI glue,
// compiled by clang and componentized by jco, loads as a component and
// runs a real persistent process through canon-lowered
// spawn-persistent, wait, read-since and release; a denied command is
// the tool's error and the pool keeps serving.
func TestCComponent(t *testing.T) {
	comp := buildCCapsule(t)
	e := newHost(t, nil)
	c, err := e.h.Load(context.Background(), capsuleDir(t, "ccap", comp, ccapManifest))
	if refusedByEngine(t, err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Tools()); n != 2 || c.Tools()[0].Name != "echo" || c.Tools()[1].Name != "persist" {
		t.Fatalf("tools %+v", c.Tools())
	}
	ctx := host.WithPrincipal(context.Background(), "alice")
	tests := []struct {
		name, tool, input string
		want              map[string]any // nil: an error wrapping wantErr whose text has errText
		wantErr           error
		errText           string
	}{
		{"echo", "echo", `{"n":1}`, map[string]any{"n": 1.0}, nil, ""},
		{"persistent process", "persist", `{"script":"echo from c; echo \"quoted\\tx\""}`,
			map[string]any{"exit": 0.0, "id_len": 52.0, "stdout": "from c\nquoted\tx\n"}, nil, ""},
		{"exit code, empty stdout", "persist", `{"script":"exit 3"}`, map[string]any{"exit": 3.0, "id_len": 52.0, "stdout": ""}, nil, ""},
		// The guest's own err result, with the host's error-code.
		{"denied command", "persist", `{"cmd":"/bin/cat","script":"x"}`, nil, host.ErrToolFailed, "spawn-persistent: capability-denied"},
		// The host checks the input against the tool's schema first.
		{"bad input", "persist", `{}`, nil, host.ErrInvalidInput, "script"},
		{"unknown tool", "nope", `{}`, nil, host.ErrUnknownTool, "nope"},
	}
	for i := 0; i < 2; i++ { // twice: the pooled instance's memory is reused
		for _, tc := range tests {
			r, err := e.h.Call(ctx, "ccap", tc.tool, tc.input)
			if tc.want == nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("%s: %+v %v, want %v with %q", tc.name, r, err, tc.wantErr, tc.errText)
				}
				continue
			}
			var got map[string]any
			if err != nil || json.Unmarshal([]byte(r.Output), &got) != nil {
				t.Fatalf("%s: %+v %v", tc.name, r, err)
			}
			if g, _ := json.Marshal(got); string(g) != mustJSON(t, tc.want) {
				t.Fatalf("%s: got %s, want %s", tc.name, g, mustJSON(t, tc.want))
			}
		}
	}
	// Every process was released: the registry holds none for alice.
	if ps := e.reg.OperatorList(registry.OperatorFilter{Capsule: "ccap", Principal: "alice"}); len(ps) != 0 {
		t.Fatalf("processes left: %+v", ps)
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

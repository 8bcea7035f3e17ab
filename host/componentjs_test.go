package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

const jscapManifest = `
[imports]
"capsule:process" = "1.1"

[capabilities]
exec = ["/bin/echo", "/bin/sh"]
allow_persistent = true
backend = "local"

[pool]
min_idle = 2
max = 4
`

// jsComponent is the JS test capsule (componentize-js, built once and
// cached). Tests named TestJS* take it; under -race they skip, because a
// cold compile of its 12 MB StarlingMonkey core module by wazero's
// race-instrumented compiler takes about a minute (130 s of the race leg
// for the two of TestJSContract) and race-checks nothing the Go-guest
// tests of the same host paths do not. `make unit` runs ^TestJS again
// without -race (NORACE_RUN).
func jsComponent(t *testing.T, wasi bool) string {
	t.Helper()
	if testutil.Race {
		t.Skip("SKIP under -race: a cold compile of the 12 MB JS component takes about a minute with the race detector; `make unit` runs the TestJS tests again without -race")
	}
	return componenttest.BuildJS(t, filepath.Join(componenttest.Dir(), "..", "jscap", "capsule.js"), "capsule:guest/capsule", wasi)
}

// TestJSLoad: a JavaScript capsule built by componentize-js
// (a 12 MB component with its own WASI 0.2 imports) loads through
// Host.Load, pools, and serves tool calls that spawn an ephemeral and a
// persistent process through canon-lowered capsule:process imports.
func TestJSLoad(t *testing.T) {
	comp := jsComponent(t, false)
	e := newHost(t, nil)
	c, err := e.h.Load(context.Background(), capsuleDir(t, "jscap", comp, jscapManifest))
	if refusedByEngine(t, err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range c.Tools() {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "echo,run,persist,do,wasi,fail,trap" || c.Tools()[0].Description != "js echo" {
		t.Fatalf("tools %s (%+v)", got, c.Tools())
	}
	waitFor(t, func() bool { return c.Stats().Idle >= 2 })
	ctx := host.WithPrincipal(context.Background(), "alice")
	seen := map[uint64]bool{}
	for i := 0; i < 4; i++ {
		r, err := e.h.Call(ctx, "jscap", "echo", `{"n":1}`)
		if err != nil || r.Output != `{"n":1}` {
			t.Fatalf("echo: %+v %v", r, err)
		}
		seen[r.Instance] = true
	}
	if len(seen) < 2 {
		t.Fatalf("4 calls ran on %d instance(s), want the pool's 2", len(seen))
	}
	var out map[string]any
	r, err := e.h.Call(ctx, "jscap", "run", `{"cmd":"/bin/echo","args":["from js"]}`)
	if err != nil || json.Unmarshal([]byte(r.Output), &out) != nil || out["stdout"] != "from js\n" || out["exit"] != 0.0 {
		t.Fatalf("run: %+v %v", r, err)
	}
	r, err = e.h.Call(ctx, "jscap", "persist", `{"cmd":"/bin/sh","args":["-c","echo persisted"]}`)
	if err != nil || json.Unmarshal([]byte(r.Output), &out) != nil || out["stdout"] != "persisted\n" || out["exit"] != 0.0 {
		t.Fatalf("persist: %+v %v", r, err)
	}
	_, err = e.h.Call(ctx, "jscap", "fail", `{}`)
	var te *host.ToolError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "failed on purpose") {
		t.Fatalf("fail: %v", err)
	}
	// A spawn outside the capabilities is the tool's error, not a trap.
	_, err = e.h.Call(ctx, "jscap", "run", `{"cmd":"/bin/cat"}`)
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "capability") {
		t.Fatalf("denied spawn: %v", err)
	}
	// The pool still serves.
	if r, err := e.h.Call(ctx, "jscap", "echo", `{}`); err != nil || r.Output != `{}` {
		t.Fatalf("echo after errors: %+v %v", r, err)
	}
}

// refusedByEngine: an engine that cannot link core instances (wasmtime
// today) refuses every component at Load with ErrLinkUnsupported.
func refusedByEngine(t *testing.T, err error) bool {
	t.Helper()
	if enginetest.HostEngine() != "wasmtime" {
		return false
	}
	if !errors.Is(err, engine.ErrLinkUnsupported) || !errors.Is(err, component.ErrUnsupported) {
		t.Fatalf("a component under wasmtime: %v, want ErrLinkUnsupported", err)
	}
	return true
}

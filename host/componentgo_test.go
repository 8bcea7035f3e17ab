package host_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/registry"
)

const goCompManifest = `
[imports]
"capsule:process" = "1.1"

[capabilities]
exec = ["/bin/sh"]
allow_persistent = true
backend = "local"

[pool]
min_idle = 1
max = 3
`

// goComponent is the bundled testcap made a component the way a user
// would: goadapt's cabi_realloc_adapter, then jco with the reactor
// adapter (componenttest.WrapGo).
func goComponent(t testing.TB) string {
	return componenttest.WrapGo(t, componenttest.Testcap(t), "capsule:guest/capsule")
}

// TestGoComponent: the Go testcap as a component loads (the adapter's
// allocations go to goadapt's arena, not to Go), serves warm calls on
// several pooled instances, and runs a persistent process through the
// canon-lowered imports: spawn on one call, read its output on later
// ones, release it.
func TestGoComponent(t *testing.T) {
	comp := goComponent(t)
	e := newHost(t, nil)
	_, err := e.h.Load(context.Background(), capsuleDir(t, "gocomp", comp, goCompManifest))
	if refusedByEngine(t, err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := host.WithPrincipal(context.Background(), "alice")
	call := func(tool, in string) map[string]any {
		t.Helper()
		r, err := e.h.Call(ctx, "gocomp", tool, in)
		var out map[string]any
		if err != nil || json.Unmarshal([]byte(r.Output), &out) != nil {
			t.Fatalf("%s(%s): %+v %v", tool, in, r, err)
		}
		return out
	}
	for i := 0; i < 5; i++ {
		if out := call("echo", `{"n":1}`); out["n"] != 1.0 {
			t.Fatalf("echo = %v", out)
		}
	}
	id, _ := call("spawn_persistent", `{"request":{"cmd":"/bin/sh","args":["-c","echo ready; echo bye"]},"options":{"label":"gocomp"}}`)["ok"].(string)
	if len(id) != 52 {
		t.Fatalf("spawn_persistent id %q", id)
	}
	deadline := time.Now().Add(10 * time.Second)
	var data string
	for !strings.Contains(data, "bye") && time.Now().Before(deadline) {
		out := call("read_since", `{"id":"`+id+`","stream":"stdout","max":1024}`)
		chunk, _ := out["ok"].(map[string]any)
		b, _ := base64.StdEncoding.DecodeString(fmt.Sprint(chunk["data"]))
		data = string(b)
		time.Sleep(20 * time.Millisecond)
	}
	if data != "ready\nbye\n" {
		t.Fatalf("read_since data %q", data)
	}
	if out := call("release", `{"id":"`+id+`"}`); out["error"] != nil {
		t.Fatalf("release = %v", out)
	}
	if ps := e.reg.OperatorList(registry.OperatorFilter{Capsule: "gocomp", Principal: "alice"}); len(ps) != 0 {
		t.Fatalf("processes left: %+v", ps)
	}
}

// BenchmarkGoComponentCall: one warm echo call per iteration on the Go
// testcap as a core module and as a component (goadapt + jco), medians.
// With BenchmarkInstanceMemory in host/component, one run gives both
// figures of RFC §17:
//
//	go test -run '^$' -bench 'GoComponentCall|InstanceMemory/go-' -benchtime 300x ./host/ ./host/component/
func BenchmarkGoComponentCall(b *testing.B) {
	if enginetest.HostEngine() == "wasmtime" {
		b.Skip("SKIP: the wasmtime engine refuses components (ErrLinkUnsupported, RFC §17)")
	}
	core := filepath.Join(componenttest.Root(), "capsules", "testcap", "testcap.wasm")
	benchCallForms(b, [2]string{core, goComponent(b)}, "gocomp", goCompManifest)
}

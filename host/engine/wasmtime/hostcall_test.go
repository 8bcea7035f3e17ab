//go:build wasmtime

package wasmtime

import (
	"context"
	"testing"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
)

func hostEntryCount() int {
	n := 0
	hostEntries.Range(func(any, any) bool { n++; return true })
	return n
}

// TestHostEntriesFreed: a host function's entry lives exactly as long as
// wasmtime holds the function, past the engine's Close while an instance
// still uses it, and is freed by wasmtime's finalizer once the last
// store holding it is gone (no test here runs in parallel, so the count
// is this test's alone).
func TestHostEntriesFreed(t *testing.T) {
	ctx := context.Background()
	before := hostEntryCount()
	f := enginetest.NewFixture(t, New, engine.EngineConfig{})
	defined := hostEntryCount() - before
	if want := len(enginetest.HostFuncs()) + 1; defined != want { // + fd_write
		t.Fatalf("%d entries defined, want %d", defined, want)
	}
	if err := f.Eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The instance outlives its engine's Close and its host functions
	// still run.
	if r, err := f.Inst.Call(ctx, "add", 40, 2); err != nil || r[0] != 42 {
		t.Fatalf("add after engine Close = %v, %v", r, err)
	}
	if hostEntryCount() != before+defined {
		t.Fatal("entries freed while an instance holds their functions")
	}
	if err := f.Inst.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.Mod.Close(ctx)
	if n := hostEntryCount(); n != before {
		t.Fatalf("%d entries after the last store closed, want %d", n, before)
	}
}

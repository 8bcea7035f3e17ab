package wazero_test

import (
	"context"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
)

// memModule is (memory 1) with (func (export "grow") (param i32)
// (result i32) (memory.grow (local.get 0))).
var memModule = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f, // type
	0x03, 0x02, 0x01, 0x00, // func
	0x05, 0x03, 0x01, 0x00, 0x01, // memory min 1
	0x07, 0x08, 0x01, 0x04, 'g', 'r', 'o', 'w', 0x00, 0x00, // export
	0x0a, 0x08, 0x01, 0x06, 0x00, 0x20, 0x00, 0x40, 0x00, 0x0b, // code
}

// The memories of one Store (a component instance's core instances)
// share the instance's memory limit, as a core module's one memory has
// it alone; another Store has its own.
func TestStoreMemoryBudget(t *testing.T) {
	ctx := context.Background()
	e, err := wazero.New(ctx, engine.EngineConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	mod, err := e.Compile(ctx, memModule)
	if err != nil {
		t.Fatal(err)
	}
	l := e.(engine.Linker)
	newStore := func(pages uint32) engine.Store {
		st, err := l.NewStore(ctx, engine.InstanceConfig{Name: "budget", MemoryLimitPages: pages})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(ctx) })
		return st
	}
	grow := func(st engine.Store, si engine.StoreInstance, n uint64) int32 {
		t.Helper()
		f, _ := si.Export("grow")
		r, err := st.Call(ctx, f, n)
		if err != nil {
			t.Fatal(err)
		}
		return int32(r[0])
	}
	st := newStore(3)
	a, err := st.Instantiate(ctx, mod, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Instantiate(ctx, mod, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := grow(st, a, 1); got != 1 {
		t.Fatalf("a: grow 1 = %d, want old size 1 (3 of 3 pages)", got)
	}
	if got := grow(st, b, 1); got != -1 {
		t.Fatalf("b: grow past the shared limit = %d, want -1", got)
	}
	if _, err := st.Instantiate(ctx, mod, nil); err == nil || !strings.Contains(err.Error(), "shared by all") {
		t.Fatalf("a third memory over the limit: %v", err)
	}
	other := newStore(3)
	c, err := other.Instantiate(ctx, mod, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := grow(other, c, 2); got != 1 {
		t.Fatalf("another store: grow 2 = %d, want 1", got)
	}
}

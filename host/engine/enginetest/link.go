package enginetest

import (
	"context"
	_ "embed"
	"errors"
	"testing"

	"github.com/capsule-host/capsule-host/host/engine"
)

// The linking fixtures (testdata/link_*.wat): a provider exporting a
// memory, a table, a mutable global and funcs, and a user importing all
// of them plus a host function, under other names.
var (
	//go:embed testdata/link_provider.wasm
	linkProvider []byte
	//go:embed testdata/link_user.wasm
	linkUser []byte
)

// linkFixture is one engine with both fixtures compiled.
type linkFixture struct {
	eng            engine.Engine
	linker         engine.Linker
	provider, user engine.Module
}

// newLinkFixture skips, loudly, an engine that cannot link: such an engine
// must refuse components (the host turns ErrLinkUnsupported into a load
// error), which the host's tests check.
func newLinkFixture(t *testing.T, ctor Ctor) *linkFixture {
	t.Helper()
	ctx := context.Background()
	e, err := ctor(ctx, engine.EngineConfig{}, HostFuncs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	l, ok := e.(engine.Linker)
	if !ok {
		t.Skipf("SKIP (engine %s): does not implement engine.Linker, so it refuses components (%v)", e.Name(), engine.ErrLinkUnsupported)
	}
	f := &linkFixture{eng: e, linker: l}
	if f.provider, err = e.Compile(ctx, linkProvider); err != nil {
		t.Fatal(err)
	}
	if f.user, err = e.Compile(ctx, linkUser); err != nil {
		t.Fatal(err)
	}
	return f
}

func export(t *testing.T, si engine.StoreInstance, name string) engine.Extern {
	t.Helper()
	x, ok := si.Export(name)
	if !ok {
		t.Fatalf("no export %q", name)
	}
	return x
}

// build instantiates provider then user in a new store; twice counts the
// host function's calls.
func (f *linkFixture) build(t *testing.T, calls *int) (st engine.Store, provider, user engine.StoreInstance) {
	t.Helper()
	ctx := context.Background()
	st, err := f.linker.NewStore(ctx, engine.InstanceConfig{Name: "link#1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(ctx) })
	p, err := st.Instantiate(ctx, f.provider, nil)
	if err != nil {
		t.Fatal(err)
	}
	hf, err := st.Funcs(ctx, []engine.HostFunc{{Module: "host", Name: "twice",
		Params: []engine.ValueType{i32}, Results: []engine.ValueType{i32},
		Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
			*calls++
			if s[0] == 13 {
				engine.Trapf("unlucky %d", s[0])
			}
			s[0] = 2 * s[0]
		}}})
	if err != nil {
		t.Fatal(err)
	}
	u, err := st.Instantiate(ctx, f.user, engine.Imports{
		"env": {"mem": export(t, p, "memory"), "tbl": export(t, p, "table"),
			"counter": export(t, p, "counter"), "load": export(t, p, "load")},
		"host": {"twice": hf[0]},
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, p, u
}

func storeCall(t *testing.T, st engine.Store, fn engine.Extern, params ...uint64) uint64 {
	t.Helper()
	r, err := st.Call(context.Background(), fn, params...)
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 1 {
		t.Fatalf("%d results, want 1", len(r))
	}
	return r[0]
}

// testLink: the user's instance shares the provider's memory, table and
// global, and calls a Store host function.
func testLink(t *testing.T, ctor Ctor) {
	f := newLinkFixture(t, ctor)
	var calls int
	st, p, u := f.build(t, &calls)
	// run writes the shared memory, reads it through the provider and
	// doubles it through the host function.
	if got := storeCall(t, st, export(t, u, "run"), 21); got != 42 || calls != 1 {
		t.Fatalf("run(21) = %d with %d host calls, want 42 and 1", got, calls)
	}
	// The user instance's exports are reached through the provider's
	// table, which its elem segment filled at instantiation.
	if got := storeCall(t, st, export(t, p, "dispatch"), 5, 1); got != 105 {
		t.Fatalf("dispatch through the shared table = %d, want 105", got)
	}
	if got := storeCall(t, st, export(t, p, "count")); got != 1 {
		t.Fatalf("shared global = %d, want 1 (the user incremented it)", got)
	}
	mem, ok := st.Memory(export(t, p, "memory"))
	if !ok || !mem.Write(8, []byte{21, 0, 0, 0}) {
		t.Fatal("memory extern not writable")
	}
	if got := storeCall(t, st, export(t, p, "load"), 8); got != 21 {
		t.Fatalf("load = %d, want 21", got)
	}
	if b, ok := mem.Read(8, 4); !ok || b[0] != 21 {
		t.Fatalf("memory read back %v %v", b, ok)
	}
	params, results, ok := st.FuncType(export(t, p, "dispatch"))
	if !ok || len(params) != 2 || len(results) != 1 || params[0] != i32 {
		t.Fatalf("FuncType(dispatch) = %v %v %v", params, results, ok)
	}
	if _, ok := st.Memory(export(t, p, "load")); ok {
		t.Fatal("Memory of a func extern succeeded")
	}
}

// testLinkRefused: what is not given, or not of the kind imported, is an
// ErrLink before anything runs; a trap in a store host function is a
// *Trap of that call.
func testLinkRefused(t *testing.T, ctor Ctor) {
	f := newLinkFixture(t, ctor)
	ctx := context.Background()
	st, err := f.linker.NewStore(ctx, engine.InstanceConfig{Name: "link#2"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	p, err := st.Instantiate(ctx, f.provider, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing resolves by name: the engine's own host module is not seen.
	if _, err := st.Instantiate(ctx, f.user, nil); !errors.Is(err, engine.ErrLink) {
		t.Fatalf("user with no imports: %v, want ErrLink", err)
	}
	bad := engine.Imports{"env": {"mem": export(t, p, "table"), "tbl": export(t, p, "table"),
		"counter": export(t, p, "counter"), "load": export(t, p, "load")}, "host": {"twice": export(t, p, "load")}}
	if _, err := st.Instantiate(ctx, f.user, bad); !errors.Is(err, engine.ErrLink) {
		t.Fatalf("a table given for a memory: %v, want ErrLink", err)
	}
	other, err := f.linker.NewStore(ctx, engine.InstanceConfig{Name: "link#3"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Call(ctx, export(t, p, "count")); !errors.Is(err, engine.ErrLink) {
		t.Fatalf("calling another store's func: %v, want ErrLink", err)
	}
	var calls int
	st2, _, u2 := f.build(t, &calls)
	var trap *engine.Trap
	if _, err := st2.Call(ctx, export(t, u2, "run"), 13); !errors.As(err, &trap) || trap.Reason != "unlucky 13" {
		t.Fatalf("host trap: %v, want *Trap \"unlucky 13\"", err)
	}
}

// testLinkIsolated: two stores of the same modules share nothing.
func testLinkIsolated(t *testing.T, ctor Ctor) {
	f := newLinkFixture(t, ctor)
	var c1, c2 int
	st1, p1, _ := f.build(t, &c1)
	st2, p2, _ := f.build(t, &c2)
	storeCall(t, st1, export(t, p1, "dispatch"), 1, 1)
	storeCall(t, st1, export(t, p1, "dispatch"), 1, 1)
	if got := storeCall(t, st2, export(t, p2, "count")); got != 0 {
		t.Fatalf("store 2's global = %d, want 0 (store 1's calls leaked)", got)
	}
	if got := storeCall(t, st1, export(t, p1, "count")); got != 2 {
		t.Fatalf("store 1's global = %d, want 2", got)
	}
	if err := st1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := storeCall(t, st2, export(t, p2, "dispatch"), 1, 1); got != 101 {
		t.Fatalf("store 2 after store 1 closed: dispatch = %d, want 101", got)
	}
	if _, err := st1.Call(context.Background(), export(t, p1, "count")); err == nil {
		t.Fatal("a call into a closed store succeeded")
	}
}

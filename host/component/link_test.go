package component_test

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
)

// linktest.wasm is world test:comp/w (testdata/linktest: core.wat wrapped
// by jco with wit-component's shim and fixup instances; build.sh).
//
//go:embed testdata/linktest/linktest.wasm
var linkTest []byte

const testIface = "test:comp/host@1.0.0"

var i32 = engine.I32

// testHost serves test:comp/host@1.0.0 as the Canonical ABI says:
// add(u32,u32)->u32 flat; greet(string)->string through memory, realloc
// and a return pointer.
func testHost(version string) component.HostFuncs {
	return func(engine.InstanceConfig) []engine.HostFunc {
		return []engine.HostFunc{
			{Module: "test:comp/host@" + version, Name: "add", Params: []engine.ValueType{i32, i32}, Results: []engine.ValueType{i32},
				Fn: func(_ context.Context, _ engine.Caller, s []uint64) { s[0] = uint64(uint32(s[0]) + uint32(s[1])) }},
			{Module: "test:comp/host@" + version, Name: "greet", Params: []engine.ValueType{i32, i32, i32},
				Fn: greet},
		}
	}
}

func greet(ctx context.Context, c engine.Caller, s []uint64) {
	name, ok := c.Memory().Read(uint32(s[0]), uint32(s[1]))
	if !ok {
		engine.Trapf("greet: name out of range")
	}
	out := append([]byte("hello "), name...)
	p, err := c.Realloc(ctx, 0, 0, 1, uint32(len(out)))
	if err != nil {
		panic(&engine.Trap{Reason: "greet: realloc: " + err.Error()})
	}
	if !c.Memory().Write(p, out) {
		engine.Trapf("greet: realloc returned %#x, out of range", p)
	}
	ret := []byte{byte(p), byte(p >> 8), byte(p >> 16), byte(p >> 24), byte(len(out)), 0, 0, 0}
	if !c.Memory().Write(uint32(s[2]), ret) {
		engine.Trapf("greet: return pointer out of range")
	}
}

func newEngine(t *testing.T) engine.Engine {
	t.Helper()
	ctx := context.Background()
	e, err := wazero.New(ctx, engine.EngineConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	return e
}

func compileLinkTest(t *testing.T, funcs component.HostFuncs) (*component.Module, error) {
	t.Helper()
	c, err := component.Parse(linkTest)
	if err != nil {
		t.Fatal(err)
	}
	return component.Compile(context.Background(), newEngine(t), c, funcs, nil)
}

func call(t *testing.T, in engine.Instance, name string, params ...uint64) []uint64 {
	t.Helper()
	r, err := in.Call(context.Background(), name, params...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// str lowers s into the instance through its cabi_realloc, as the host's
// tool calls do.
func str(t *testing.T, in engine.Instance, s string) (uint64, uint64) {
	t.Helper()
	p := call(t, in, "cabi_realloc", 0, 0, 1, uint64(len(s)))[0]
	if !in.Memory().Write(uint32(p), []byte(s)) {
		t.Fatal("write")
	}
	return p, uint64(len(s))
}

func readStr(t *testing.T, in engine.Instance, retptr uint64) string {
	t.Helper()
	b, ok := in.Memory().Read(uint32(retptr), 8)
	if !ok {
		t.Fatal("retptr out of range")
	}
	p := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	n := uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24
	s, ok := in.Memory().Read(p, n)
	if !ok {
		t.Fatal("string out of range")
	}
	return string(s)
}

// TestLinkComponent runs a real jco-made component: its shim, main and
// fixup core instances link on the engine seam, a lowered host import
// with memory and realloc options works, lifted exports with
// post-return are presented under core-capsule names.
func TestLinkComponent(t *testing.T) {
	m, err := compileLinkTest(t, testHost("1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer m.Close(ctx)
	var names []string
	for _, d := range m.Exports() {
		names = append(names, d.Name)
	}
	for _, want := range []string{"run", "echo", "cabi_post_echo", "hello", "cabi_realloc", "boom", "cabi_post_boom"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Fatalf("exports %v lack %q", names, want)
		}
	}
	if len(m.Imports()) != 2 || m.Imports()[0].Module != testIface {
		t.Fatalf("imports %+v", m.Imports())
	}
	for i := 0; i < 2; i++ { // two instances share nothing
		in, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "linktest#1"})
		if err != nil {
			t.Fatal(err)
		}
		if got := call(t, in, "run", 41); got[0] != 42 {
			t.Fatalf("run(41) = %d (the host's add through canon lower)", got[0])
		}
		p, n := str(t, in, "capsule")
		if got := readStr(t, in, call(t, in, "echo", p, n)[0]); got != "capsule" {
			t.Fatalf("echo = %q", got)
		}
		p, n = str(t, in, "world")
		if got := readStr(t, in, call(t, in, "hello", p, n)[0]); got != "hello world" {
			t.Fatalf("hello = %q (greet lowered with memory and realloc)", got)
		}
		if err := in.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLinkHostile: a realloc returning garbage and a post-return that
// traps are traps of that call only; the next instance works.
func TestLinkHostile(t *testing.T) {
	m, err := compileLinkTest(t, testHost("1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer m.Close(ctx)
	in, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "linktest#evil"})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)
	p, n := str(t, in, "x")
	call(t, in, "set-evil", 1)
	var trap *engine.Trap
	if _, err := in.Call(ctx, "hello", p, n); !errors.As(err, &trap) || !strings.Contains(trap.Reason, "out of range") {
		t.Fatalf("hello with a garbage realloc: %v, want a trap", err)
	}
	ret := call(t, in, "boom")
	if _, err := in.Call(ctx, "cabi_post_boom", ret[0]); !errors.As(err, &trap) || trap.Reason != "unreachable" {
		t.Fatalf("trapping post-return: %v", err)
	}
	in2, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "linktest#2"})
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close(ctx)
	if got := call(t, in2, "run", 1); got[0] != 2 {
		t.Fatalf("next instance: run(1) = %d", got[0])
	}
}

// TestLinkRefused: before anything is instantiated, an import the host
// does not serve, an incompatible version, and a host function of the
// wrong type are typed errors naming interface, function and both types.
func TestLinkRefused(t *testing.T) {
	_, err := compileLinkTest(t, func(engine.InstanceConfig) []engine.HostFunc { return nil })
	var ce *component.Error
	if !errors.Is(err, component.ErrUnsupported) || !errors.As(err, &ce) || !strings.Contains(ce.Construct, testIface) {
		t.Fatalf("nothing served: %v", err)
	}
	if _, err := compileLinkTest(t, testHost("2.0.0")); !errors.Is(err, component.ErrUnsupported) || !strings.Contains(err.Error(), "test:comp/host@2.0.0") {
		t.Fatalf("only 2.0.0 served: %v", err)
	}
	if _, err := compileLinkTest(t, testHost("1.3.0")); err != nil {
		t.Fatalf("1.3.0 serves a 1.0.0 import: %v", err)
	}
	wrong := func(cfg engine.InstanceConfig) []engine.HostFunc {
		fs := testHost("1.0.0")(cfg)
		fs[0].Params = []engine.ValueType{engine.I64}
		return fs
	}
	_, err = compileLinkTest(t, wrong)
	if !errors.Is(err, component.ErrMismatch) || !strings.Contains(err.Error(), `"add"`) ||
		!strings.Contains(err.Error(), "(i32 i32) -> (i32)") || !strings.Contains(err.Error(), "(i64) -> (i32)") {
		t.Fatalf("add of the wrong type: %v", err)
	}
	noLink := struct{ engine.Engine }{newEngine(t)}
	c, _ := component.Parse(linkTest)
	if _, err := component.Compile(context.Background(), noLink, c, testHost("1.0.0"), nil); !errors.Is(err, engine.ErrLinkUnsupported) {
		t.Fatalf("an engine without Linker: %v", err)
	}
}

package wazero_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
)

// The engine conformance suite, shared with wasmtime: same results, trap
// reasons and error classes on every engine.
func TestConformance(t *testing.T) { enginetest.Run(t, wazero.New) }

var i32 = engine.I32

func hostFuncs() []engine.HostFunc {
	const m = "test:h/h@1.0.0"
	return []engine.HostFunc{
		{Module: m, Name: "add", Params: []engine.ValueType{i32, i32}, Results: []engine.ValueType{i32},
			Fn: func(ctx context.Context, c engine.Caller, s []uint64) { s[0] = uint64(uint32(s[0]) + uint32(s[1])) }},
		{Module: m, Name: "trap", Fn: func(ctx context.Context, c engine.Caller, s []uint64) { engine.Trapf("forged handle %d", 7) }},
		{Module: m, Name: "give", Params: []engine.ValueType{i32}, Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
			p, err := c.Realloc(ctx, 0, 0, 1, 5)
			if err != nil {
				engine.Trapf("realloc: %v", err)
			}
			if !c.Memory().Write(p, []byte("given")) {
				engine.Trapf("write")
			}
			var b [4]byte
			b[0], b[1], b[2], b[3] = byte(p), byte(p>>8), byte(p>>16), byte(p>>24)
			c.Memory().Write(uint32(s[0]), b[:])
		}},
	}
}

type fixture struct {
	eng  engine.Engine
	mod  engine.Module
	inst engine.Instance
	out  bytes.Buffer
	err  bytes.Buffer
}

func newFixture(t testing.TB, cfg engine.EngineConfig) *fixture {
	t.Helper()
	ctx := context.Background()
	wasm, err := os.ReadFile("testdata/engine.wasm")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{}
	f.eng, err = wazero.New(ctx, cfg, hostFuncs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.eng.Close(ctx) })
	f.mod, err = f.eng.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	f.inst, err = f.mod.Instantiate(ctx, engine.InstanceConfig{Name: "t#1", Stdout: &f.out, Stderr: &f.err})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) call(t *testing.T, export string, params ...uint64) uint64 {
	t.Helper()
	r, err := f.inst.Call(context.Background(), export, params...)
	if err != nil {
		t.Fatalf("%s: %v", export, err)
	}
	if len(r) == 0 {
		return 0
	}
	return r[0]
}

func TestReactorAndHostCalls(t *testing.T) {
	f := newFixture(t, engine.EngineConfig{})
	if got := f.call(t, "inited"); got != 42 {
		t.Fatalf("_initialize not run: %d", got)
	}
	if got := f.call(t, "add", 40, 2); got != 42 {
		t.Fatalf("add = %d", got)
	}
	p := uint32(f.call(t, "give"))
	if b, ok := f.inst.Memory().Read(p, 5); !ok || string(b) != "given" {
		t.Fatalf("realloc'd memory = %q %v", b, ok)
	}
}

func TestImportsExports(t *testing.T) {
	f := newFixture(t, engine.EngineConfig{})
	imp := f.mod.Imports()
	if imp[0].Module != "test:h/h@1.0.0" || imp[0].Name != "add" || len(imp[0].Params) != 2 || imp[0].Results[0] != engine.I32 {
		t.Fatalf("imports[0] = %+v", imp[0])
	}
	found := false
	for _, e := range f.mod.Exports() {
		if e.Name == "cabi_realloc" && len(e.Params) == 4 && len(e.Results) == 1 {
			found = true
		}
	}
	if !found {
		t.Fatalf("cabi_realloc export not listed: %+v", f.mod.Exports())
	}
}

func TestWASI(t *testing.T) {
	f := newFixture(t, engine.EngineConfig{})
	if errno := f.call(t, "hello"); errno != 0 {
		t.Fatalf("fd_write errno %d", errno)
	}
	if f.out.String() != "hello\n" || f.err.String() != "hello\n" {
		t.Fatalf("stdout %q stderr %q", f.out.String(), f.err.String())
	}
	if errno := f.call(t, "prestat"); errno != 8 {
		t.Fatalf("fd_prestat_get(3) errno = %d, want EBADF (no preopens)", errno)
	}
	if errno := f.call(t, "random"); errno != 0 {
		t.Fatalf("random_get errno %d", errno)
	}
	if n := f.call(t, "nargs"); n != 0 {
		t.Fatalf("args+env = %d, want 0", n)
	}
}

func TestTraps(t *testing.T) {
	tests := []struct{ export, reason string }{
		{"unreachable", "unreachable"},
		{"oob", "out of bounds memory access"},
		{"divzero", "integer divide by zero"},
		{"recurse", "stack overflow"},
		{"host_trap", "forged handle 7"},
	}
	for _, tc := range tests {
		t.Run(tc.export, func(t *testing.T) {
			f := newFixture(t, engine.EngineConfig{})
			_, err := f.inst.Call(context.Background(), tc.export)
			var tr *engine.Trap
			if !errors.As(err, &tr) {
				t.Fatalf("err = %v (%T), want *engine.Trap", err, err)
			}
			if tr.Reason != tc.reason {
				t.Fatalf("reason %q, want %q", tr.Reason, tc.reason)
			}
		})
	}
}

func TestDeadlineInterrupts(t *testing.T) {
	f := newFixture(t, engine.EngineConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.inst.Call(ctx, "spin")
	if !errors.Is(err, engine.ErrInterrupted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("interrupt took %v", d)
	}
	// A second instance of the same module still works.
	in2, err := f.mod.Instantiate(context.Background(), engine.InstanceConfig{Name: "t#2"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := in2.Call(context.Background(), "add", 1, 2); err != nil || r[0] != 3 {
		t.Fatalf("add on fresh instance: %v %v", r, err)
	}
}

func TestCancelInterrupts(t *testing.T) {
	f := newFixture(t, engine.EngineConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	_, err := f.inst.Call(ctx, "spin")
	if !errors.Is(err, engine.ErrInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestMemoryLimit(t *testing.T) {
	ctx := context.Background()
	eng, err := wazero.New(ctx, engine.EngineConfig{MemoryLimitPages: 1}, hostFuncs())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	// (memory 2) exceeds a 1-page limit.
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0, 5, 3, 1, 0, 2}
	if _, err := eng.Compile(ctx, wasm); err == nil {
		t.Fatal("2-page module compiled under a 1-page limit")
	}
}

func TestCompilationCache(t *testing.T) {
	dir := t.TempDir()
	newFixture(t, engine.EngineConfig{CacheDir: dir})
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("cache dir empty: %v", err)
	}
	newFixture(t, engine.EngineConfig{CacheDir: dir}) // loads from the cache
}

func TestBadHostFuncs(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, engine.Caller, []uint64) {}
	tests := []struct {
		name  string
		funcs []engine.HostFunc
		want  string
	}{
		{"dup", []engine.HostFunc{{Module: "a", Name: "f", Fn: fn}, {Module: "a", Name: "f", Fn: fn}}, "registered twice"},
		{"wasi", []engine.HostFunc{{Module: "wasi_snapshot_preview1", Name: "f", Fn: fn}}, "provided by the engine"},
		{"type", []engine.HostFunc{{Module: "a", Name: "f", Params: []engine.ValueType{9}, Fn: fn}}, "unsupported value type"},
		{"nofn", []engine.HostFunc{{Module: "a", Name: "f"}}, "required"},
	}
	for _, tc := range tests {
		_, err := wazero.New(ctx, engine.EngineConfig{}, tc.funcs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkHostCall is the engine's floor for a guest→host→guest crossing.
func BenchmarkExportCall(b *testing.B) {
	f := newFixture(b, engine.EngineConfig{})
	ctx := context.Background()
	for b.Loop() {
		if _, err := f.inst.Call(ctx, "add", 1, 2); err != nil {
			b.Fatal(err)
		}
	}
}

// Compile the Go conformance capsule with and without the on-disk cache,
// and instantiate it (+ _initialize).
//
//	go test -run '^$' -bench 'Compile|Instantiate' ./host/engine/wazero/
func goGuest(b *testing.B) ([]byte, []engine.HostFunc) {
	wasm, err := os.ReadFile("../../../capsules/testcap/testcap.wasm")
	if err != nil {
		b.Skipf("SKIPPED LOUDLY: the Go conformance capsule is not built (capsules/build.sh testcap): %v", err)
	}
	// Link every non-WASI import to a trapping stub: the engine alone is
	// measured, not the process bindings.
	ctx := context.Background()
	eng, err := wazero.New(ctx, engine.EngineConfig{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	mod, err := eng.Compile(ctx, wasm)
	if err != nil {
		b.Fatal(err)
	}
	var stubs []engine.HostFunc
	for _, d := range mod.Imports() {
		if d.Module != "wasi_snapshot_preview1" {
			stubs = append(stubs, engine.HostFunc{Module: d.Module, Name: d.Name, Params: d.Params, Results: d.Results,
				Fn: func(context.Context, engine.Caller, []uint64) { engine.Trapf("stub") }})
		}
	}
	return wasm, stubs
}

func BenchmarkCompile(b *testing.B) {
	wasm, stubs := goGuest(b)
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			eng, err := wazero.New(ctx, engine.EngineConfig{}, stubs)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := eng.Compile(ctx, wasm); err != nil {
				b.Fatal(err)
			}
			eng.Close(ctx)
		}
	})
	dir := b.TempDir()
	prime, err := wazero.New(ctx, engine.EngineConfig{CacheDir: dir}, stubs)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := prime.Compile(ctx, wasm); err != nil {
		b.Fatal(err)
	}
	prime.Close(ctx)
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			eng, err := wazero.New(ctx, engine.EngineConfig{CacheDir: dir}, stubs)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := eng.Compile(ctx, wasm); err != nil {
				b.Fatal(err)
			}
			eng.Close(ctx)
		}
	})
}

func BenchmarkInstantiate(b *testing.B) {
	wasm, stubs := goGuest(b)
	ctx := context.Background()
	eng, err := wazero.New(ctx, engine.EngineConfig{}, stubs)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	mod, err := eng.Compile(ctx, wasm)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		in, err := mod.Instantiate(ctx, engine.InstanceConfig{Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		in.Close(ctx)
	}
}

// Package enginetest is the conformance suite every engine behind the
// host/engine seam must pass, byte for byte the same: results, trap
// reasons, error classes, WASI behaviour, limits and the compile cache.
// Running one suite over every engine is what keeps the choice of
// engine from being a trap for the operator.
//
// Use it from a _test.go file:
//
//	enginetest.Run(t, wazero.New)
package enginetest

import (
	"context"
	_ "embed"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// SuiteWasm is the suite's guest (testdata/suite.wat).
//
//go:embed testdata/suite.wasm
var SuiteWasm []byte

// Ctor is an engine package's New.
type Ctor func(ctx context.Context, cfg engine.EngineConfig, funcs []engine.HostFunc) (engine.Engine, error)

// EngineEnv, when set, names the engine the host-level suites (host,
// capsules e2e, abi-tests) construct their Host with.
const EngineEnv = "CAPSULE_HOST_TEST_ENGINE"

// HostEngine returns the engine name host-level tests should use: EngineEnv
// if set, else the engine the build tags select — wasmtime in a
// -tags wasmtime build (so `go test -tags wasmtime ./host/...` is the
// wasmtime leg), "" (the host's default, wazero) otherwise.
func HostEngine() string {
	if e := os.Getenv(EngineEnv); e != "" {
		return e
	}
	return taggedEngine
}

const hostModule = "test:h/h@1.0.0"

type ctxKey struct{}

var i32, i64, f32, f64 = engine.I32, engine.I64, engine.F32, engine.F64

// HostFuncs are the suite guest's imports.
func HostFuncs() []engine.HostFunc {
	return []engine.HostFunc{
		{Module: hostModule, Name: "add", Params: []engine.ValueType{i32, i32}, Results: []engine.ValueType{i32},
			Fn: func(ctx context.Context, c engine.Caller, s []uint64) { s[0] = uint64(uint32(s[0]) + uint32(s[1])) }},
		{Module: hostModule, Name: "trap", Fn: func(ctx context.Context, c engine.Caller, s []uint64) { engine.Trapf("forged handle %d", 7) }},
		{Module: hostModule, Name: "give", Params: []engine.ValueType{i32}, Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
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
		{Module: hostModule, Name: "give_spin", Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
			if _, err := c.Realloc(ctx, 0, 0, 1, 0xfffffff0); err != nil {
				engine.Trapf("realloc: %v", err)
			}
		}},
		{Module: hostModule, Name: "ctxval", Results: []engine.ValueType{i32}, Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
			v, _ := ctx.Value(ctxKey{}).(int)
			s[0] = uint64(v)
		}},
		{Module: hostModule, Name: "panic_rt", Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
			var m map[string]int
			m["x"] = 1 // assignment to entry in nil map
		}},
		{Module: hostModule, Name: "panic_str", Fn: func(ctx context.Context, c engine.Caller, s []uint64) { panic("boom") }},
		{Module: hostModule, Name: "wide", Params: []engine.ValueType{i64, f32, f64}, Results: []engine.ValueType{i64},
			Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
				// i64 + the raw bits of both floats: checks every value
				// type crosses unmangled in both directions.
				s[0] = s[0] + s[1] + s[2]
			}},
	}
}

// Fixture is one engine, the suite module and one instance.
type Fixture struct {
	Eng      engine.Engine
	Mod      engine.Module
	Inst     engine.Instance
	Out, Err testutil.SyncBuffer
}

// NewFixture builds an engine with HostFuncs, compiles the suite guest and
// instantiates it once.
func NewFixture(t testing.TB, ctor Ctor, cfg engine.EngineConfig) *Fixture {
	t.Helper()
	ctx := context.Background()
	f := &Fixture{}
	var err error
	f.Eng, err = ctor(ctx, cfg, HostFuncs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Eng.Close(ctx) })
	f.Mod, err = f.Eng.Compile(ctx, SuiteWasm)
	if err != nil {
		t.Fatal(err)
	}
	f.Inst, err = f.Mod.Instantiate(ctx, engine.InstanceConfig{Name: "t#1", Stdout: &f.Out, Stderr: &f.Err})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Inst.Close(ctx) })
	return f
}

func (f *Fixture) call(t *testing.T, export string, params ...uint64) uint64 {
	t.Helper()
	r, err := f.Inst.Call(context.Background(), export, params...)
	if err != nil {
		t.Fatalf("%s: %v", export, err)
	}
	if len(r) == 0 {
		return 0
	}
	return r[0]
}

// Run runs the whole suite against ctor.
func Run(t *testing.T, ctor Ctor) {
	t.Run("ReactorAndHostCalls", func(t *testing.T) { testReactor(t, ctor) })
	t.Run("ValueTypes", func(t *testing.T) { testValueTypes(t, ctor) })
	t.Run("CtxReachesHost", func(t *testing.T) { testCtx(t, ctor) })
	t.Run("ImportsExports", func(t *testing.T) { testImportsExports(t, ctor) })
	t.Run("WASI", func(t *testing.T) { testWASI(t, ctor) })
	t.Run("Traps", func(t *testing.T) { testTraps(t, ctor) })
	t.Run("DeadlineInterrupts", func(t *testing.T) { testDeadline(t, ctor, "spin") })
	t.Run("DeadlineInterruptsHostLoop", func(t *testing.T) { testDeadline(t, ctor, "spin_host") })
	t.Run("DeadlineInterruptsNestedRealloc", func(t *testing.T) { testDeadlineNested(t, ctor) })
	t.Run("CancelInterrupts", func(t *testing.T) { testCancel(t, ctor) })
	t.Run("AlreadyDone", func(t *testing.T) { testAlreadyDone(t, ctor) })
	t.Run("InterruptIsolated", func(t *testing.T) { testInterruptIsolated(t, ctor) })
	t.Run("ProcExit", func(t *testing.T) { testExit(t, ctor) })
	t.Run("MemoryLimit", func(t *testing.T) { testMemoryLimit(t, ctor) })
	t.Run("InstanceMemoryLimit", func(t *testing.T) { testInstanceMemoryLimit(t, ctor) })
	t.Run("CompilationCache", func(t *testing.T) { testCache(t, ctor) })
	t.Run("BadHostFuncs", func(t *testing.T) { testBadHostFuncs(t, ctor) })
	t.Run("ConcurrentInstances", func(t *testing.T) { testConcurrent(t, ctor) })
	t.Run("MissingExport", func(t *testing.T) { testMissingExport(t, ctor) })
	t.Run("WrongParamCount", func(t *testing.T) { testParamCount(t, ctor) })
	t.Run("UseAfterClose", func(t *testing.T) { testUseAfterClose(t, ctor) })
	t.Run("Link", func(t *testing.T) { testLink(t, ctor) })
	t.Run("LinkRefused", func(t *testing.T) { testLinkRefused(t, ctor) })
	t.Run("LinkStoresIsolated", func(t *testing.T) { testLinkIsolated(t, ctor) })
}

func testReactor(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	if got := f.call(t, "inited"); got != 42 {
		t.Fatalf("_initialize not run: %d", got)
	}
	if got := f.call(t, "add", 40, 2); got != 42 {
		t.Fatalf("add = %d", got)
	}
	// i32 results come back zero-extended, never sign-extended.
	if got := f.call(t, "add", 0xffffffff, 0); got != 0xffffffff {
		t.Fatalf("add(-1, 0) = %#x, want 0xffffffff", got)
	}
	p := uint32(f.call(t, "give"))
	if b, ok := f.Inst.Memory().Read(p, 5); !ok || string(b) != "given" {
		t.Fatalf("realloc'd memory = %q %v", b, ok)
	}
	mem := f.Inst.Memory()
	if mem.Size() != 65536 {
		t.Fatalf("memory size %d", mem.Size())
	}
	if _, ok := mem.Read(65535, 2); ok {
		t.Fatal("read past the end succeeded")
	}
	if mem.Write(65535, []byte{1, 2}) {
		t.Fatal("write past the end succeeded")
	}
	if !mem.Write(65534, []byte{1, 2}) {
		t.Fatal("write at the end failed")
	}
}

func testValueTypes(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	// f32 bits 0x3f800000 (1.0), f64 bits 0x4000000000000000 (2.0).
	got := f.call(t, "wide", 1<<40, 0x3f800000, 0x4000000000000000)
	if want := uint64(1<<40 + 0x3f800000 + 0x4000000000000000); got != want {
		t.Fatalf("wide = %#x, want %#x", got, want)
	}
}

func testCtx(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	for _, v := range []int{7, 99} {
		r, err := f.Inst.Call(context.WithValue(context.Background(), ctxKey{}, v), "ctxval")
		if err != nil || r[0] != uint64(v) {
			t.Fatalf("host saw ctx value %v (err %v), want %d", r, err, v)
		}
	}
}

func testImportsExports(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	imp := f.Mod.Imports()
	if imp[0].Module != hostModule || imp[0].Name != "add" || len(imp[0].Params) != 2 || imp[0].Results[0] != engine.I32 {
		t.Fatalf("imports[0] = %+v", imp[0])
	}
	if len(imp) != 15 {
		t.Fatalf("%d imports, want 15", len(imp))
	}
	var names []string
	found := false
	for _, e := range f.Mod.Exports() {
		names = append(names, e.Name)
		if e.Name == "cabi_realloc" && len(e.Params) == 4 && len(e.Results) == 1 {
			found = true
		}
		if e.Module != "" {
			t.Errorf("export %q has module %q", e.Name, e.Module)
		}
	}
	if !found {
		t.Fatalf("cabi_realloc export not listed: %+v", f.Mod.Exports())
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Fatalf("exports not sorted by name: %v", names)
		}
	}
}

func testWASI(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	if errno := f.call(t, "hello"); errno != 0 {
		t.Fatalf("fd_write errno %d", errno)
	}
	if n := f.call(t, "nwritten"); n != 6 {
		t.Fatalf("nwritten = %d", n)
	}
	if f.Out.String() != "hello\n" || f.Err.String() != "hello\n" {
		t.Fatalf("stdout %q stderr %q", f.Out.String(), f.Err.String())
	}
	tests := []struct {
		export string
		errno  uint64
	}{
		{"prestat", 8}, // no preopens: EBADF
		{"badfd", 8},
		{"badiov", 21}, // EFAULT
		{"random", 0},
		{"clock", 0},
		{"nargs", 0}, // empty args and env
	}
	for _, tc := range tests {
		if got := f.call(t, tc.export); got != tc.errno {
			t.Errorf("%s = %d, want %d", tc.export, got, tc.errno)
		}
	}
	now := uint64(time.Now().UnixNano())
	if got := f.call(t, "clock_value"); got+uint64(time.Minute) < now || got > now+uint64(time.Minute) {
		t.Errorf("realtime clock %d, now %d", got, now)
	}
	// Nil writers discard.
	in, err := f.Mod.Instantiate(context.Background(), engine.InstanceConfig{Name: "t#nil"})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	if r, err := in.Call(context.Background(), "hello"); err != nil || r[0] != 0 {
		t.Fatalf("fd_write to nil writers: %v %v", r, err)
	}
}

func testTraps(t *testing.T, ctor Ctor) {
	tests := []struct{ export, reason string }{
		{"unreachable", "unreachable"},
		{"oob", "out of bounds memory access"},
		{"divzero", "integer divide by zero"},
		{"overflow", "integer overflow"},
		{"badconv", "invalid conversion to integer"},
		{"recurse", "stack overflow"},
		{"host_trap", "forged handle 7"},
		{"panic_rt", "host function panicked: assignment to entry in nil map"},
		{"panic_str", "boom"},
	}
	for _, tc := range tests {
		t.Run(tc.export, func(t *testing.T) {
			f := NewFixture(t, ctor, engine.EngineConfig{})
			_, err := f.Inst.Call(context.Background(), tc.export)
			var tr *engine.Trap
			if !errors.As(err, &tr) {
				t.Fatalf("err = %v (%T), want *engine.Trap", err, err)
			}
			if tr.Reason != tc.reason {
				t.Fatalf("reason %q, want %q", tr.Reason, tc.reason)
			}
			if errors.Is(err, engine.ErrInterrupted) {
				t.Fatal("a trap is not an interruption")
			}
		})
	}
}

// testDeadlineNested: a cabi_realloc that spins while a host function
// lowers into the guest, inside an export call, ends at the call's
// deadline too: the interruption reaches guest code a host function
// called, not only the export's own. The error may be the interruption
// or the host function's trap around it; the call ends, and the instance
// is closed.
func testDeadlineNested(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := f.Inst.Call(ctx, "give_spin")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || ctx.Err() == nil {
			t.Fatalf("give_spin: %v (ctx %v), want it ended by the deadline", err, ctx.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a realloc spinning inside an export call was not interrupted by the call's deadline")
	}
	var tr *engine.Trap
	if _, err := f.Inst.Call(context.Background(), "add", 1, 2); !errors.As(err, &tr) || tr.Reason != "instance is closed" {
		t.Fatalf("call after interrupt: %v", err)
	}
}

func testDeadline(t *testing.T, ctor Ctor, export string) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.Inst.Call(ctx, export)
	if !errors.Is(err, engine.ErrInterrupted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	var tr *engine.Trap
	if errors.As(err, &tr) {
		t.Fatalf("an interruption is not a trap: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("interrupt took %v", d)
	}
	// The interrupted instance is closed, as after any ctx end.
	if _, err := f.Inst.Call(context.Background(), "add", 1, 2); !errors.As(err, &tr) || tr.Reason != "instance is closed" {
		t.Fatalf("call after interrupt: %v", err)
	}
	// A second instance of the same module still works.
	in2, err := f.Mod.Instantiate(context.Background(), engine.InstanceConfig{Name: "t#2"})
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close(context.Background())
	if r, err := in2.Call(context.Background(), "add", 1, 2); err != nil || r[0] != 3 {
		t.Fatalf("add on fresh instance: %v %v", r, err)
	}
}

func testCancel(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	_, err := f.Inst.Call(ctx, "spin")
	if !errors.Is(err, engine.ErrInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// testInterruptIsolated: ending one call's ctx interrupts that call only;
// other instances of the same engine spinning or working at the same time
// are untouched (wasmtime's epoch is engine-wide, so this is the test
// that its per-store check is right).
func testInterruptIsolated(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	ctx := context.Background()
	newInst := func() engine.Instance {
		in, err := f.Mod.Instantiate(ctx, engine.InstanceConfig{Name: "iso"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(ctx) })
		return in
	}
	a, b := newInst(), newInst()
	var wg sync.WaitGroup
	var errA, errB error
	var durA, durB time.Duration
	wg.Add(3)
	go func() {
		defer wg.Done()
		c, cancel := context.WithCancel(ctx)
		time.AfterFunc(30*time.Millisecond, cancel)
		start := time.Now()
		_, errA = a.Call(c, "spin")
		durA = time.Since(start)
	}()
	go func() {
		defer wg.Done()
		c, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, errB = b.Call(c, "spin_host")
		durB = time.Since(start)
	}()
	var errC error
	go func() {
		defer wg.Done()
		for i := 0; i < 200 && errC == nil; i++ {
			var r []uint64
			r, errC = f.Inst.Call(ctx, "add", 1, 2)
			if errC == nil && r[0] != 3 {
				errC = errors.New("wrong result")
			}
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	if !errors.Is(errA, engine.ErrInterrupted) || !errors.Is(errA, context.Canceled) {
		t.Fatalf("cancelled call: %v", errA)
	}
	if !errors.Is(errB, engine.ErrInterrupted) || !errors.Is(errB, context.DeadlineExceeded) {
		t.Fatalf("deadline call: %v", errB)
	}
	if durB < 350*time.Millisecond {
		t.Fatalf("the 400 ms call was interrupted after %v (the other call's cancel at %v reached it)", durB, durA)
	}
	if errC != nil {
		t.Fatalf("an unrelated instance failed while others were interrupted: %v", errC)
	}
}

func testAlreadyDone(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.Inst.Call(ctx, "spin")
	if !errors.Is(err, engine.ErrInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func testExit(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	_, err := f.Inst.Call(context.Background(), "exit7")
	var tr *engine.Trap
	if !errors.As(err, &tr) || tr.Reason != "guest exited with code 7" {
		t.Fatalf("err = %v", err)
	}
	if _, err := f.Inst.Call(context.Background(), "add", 1, 2); !errors.As(err, &tr) || tr.Reason != "instance is closed" {
		t.Fatalf("call after proc_exit: %v", err)
	}
}

func testMemoryLimit(t *testing.T, ctor Ctor) {
	ctx := context.Background()
	eng, err := ctor(ctx, engine.EngineConfig{MemoryLimitPages: 1}, HostFuncs())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	// (memory 2) exceeds a 1-page limit.
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0, 5, 3, 1, 0, 2}
	if _, err := eng.Compile(ctx, wasm); err == nil {
		t.Fatal("2-page module compiled under a 1-page limit")
	}
	if _, err := ctor(ctx, engine.EngineConfig{MemoryLimitPages: 65537}, nil); err == nil {
		t.Fatal("a limit above 65536 pages was accepted")
	}
	// memory.grow stops at the limit with -1, it does not trap.
	f := NewFixture(t, ctor, engine.EngineConfig{MemoryLimitPages: 3})
	if got := f.call(t, "grow", 2); got != 1 {
		t.Fatalf("grow 2 = %d, want old size 1", got)
	}
	if got := uint32(f.call(t, "grow", 1)); got != 0xffffffff {
		t.Fatalf("grow past the limit = %d, want -1", int32(got))
	}
	if f.Inst.Memory().Size() != 3*65536 {
		t.Fatalf("size %d", f.Inst.Memory().Size())
	}
}

// An instance's own limit lowers the engine's, for that instance only: a
// grow past it returns -1, a module that starts above it does not
// instantiate, and a limit above the engine's is the engine's.
func testInstanceMemoryLimit(t *testing.T, ctor Ctor) {
	ctx := context.Background()
	f := NewFixture(t, ctor, engine.EngineConfig{MemoryLimitPages: 8})
	for _, tc := range []struct{ limit, want uint32 }{{3, 3}, {100, 8}, {0, 8}} {
		in, err := f.Mod.Instantiate(ctx, engine.InstanceConfig{Name: "t#lim", MemoryLimitPages: tc.limit})
		if err != nil {
			t.Fatal(err)
		}
		grow := func(n uint64) uint32 {
			r, err := in.Call(ctx, "grow", n)
			if err != nil {
				t.Fatalf("limit %d: grow %d: %v", tc.limit, n, err)
			}
			return uint32(r[0])
		}
		if got := grow(uint64(tc.want - 1)); got != 1 {
			t.Fatalf("limit %d: grow to %d pages = %d, want old size 1", tc.limit, tc.want, got)
		}
		if got := grow(1); got != 0xffffffff {
			t.Fatalf("limit %d: grow past %d pages = %d, want -1", tc.limit, tc.want, int32(got))
		}
		if in.Memory().Size() != tc.want*65536 {
			t.Fatalf("limit %d: size %d", tc.limit, in.Memory().Size())
		}
		in.Close(ctx)
	}
	// The fixture's own instance kept the engine's limit.
	if got := f.call(t, "grow", 7); got != 1 {
		t.Fatalf("other instance: grow 7 = %d", got)
	}
	// (memory 2) under an instance limit of 1 page.
	m, err := f.Eng.Compile(ctx, []byte{0, 'a', 's', 'm', 1, 0, 0, 0, 5, 3, 1, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if in, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "t#min", MemoryLimitPages: 1}); err == nil {
		in.Close(ctx)
		t.Fatal("a 2-page memory instantiated under a 1-page instance limit")
	}
	if in, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "t#min2", MemoryLimitPages: 2}); err != nil {
		t.Fatalf("2-page memory under a 2-page instance limit: %v", err)
	} else {
		in.Close(ctx)
	}
}

func testCache(t *testing.T, ctor Ctor) {
	dir := t.TempDir()
	NewFixture(t, ctor, engine.EngineConfig{CacheDir: dir})
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("cache dir empty: %v", err)
	}
	f := NewFixture(t, ctor, engine.EngineConfig{CacheDir: dir}) // loads from the cache
	if got := f.call(t, "add", 2, 3); got != 5 {
		t.Fatalf("cached module add = %d", got)
	}
}

func testBadHostFuncs(t *testing.T, ctor Ctor) {
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
		_, err := ctor(ctx, engine.EngineConfig{}, tc.funcs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	// A module importing what the host does not serve fails to instantiate
	// with an error, not a panic.
	eng, err := ctor(ctx, engine.EngineConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	m, err := eng.Compile(ctx, SuiteWasm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "unlinked"}); err == nil {
		t.Fatal("instantiated with missing imports")
	}
	if _, err := eng.Compile(ctx, []byte("not wasm")); err == nil {
		t.Fatal("compiled garbage")
	}
}

// testConcurrent runs many instances of one module on many goroutines,
// each call carrying its own ctx value: a host function must always see
// its own call's ctx and its own instance's memory.
func testConcurrent(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := f.Mod.Instantiate(ctx, engine.InstanceConfig{Name: "c"})
			if err != nil {
				errs <- err
				return
			}
			defer in.Close(ctx)
			for i := 0; i < 200; i++ {
				v := g*1000 + i
				r, err := in.Call(context.WithValue(ctx, ctxKey{}, v), "ctxval")
				if err != nil || r[0] != uint64(v) {
					errs <- errors.New("ctx crossed instances")
					return
				}
				p, err := in.Call(ctx, "give")
				if err != nil {
					errs <- err
					return
				}
				if b, ok := in.Memory().Read(uint32(p[0]), 5); !ok || string(b) != "given" {
					errs <- errors.New("memory crossed instances")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testMissingExport(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	_, err := f.Inst.Call(context.Background(), "nope")
	if err == nil || !strings.Contains(err.Error(), `no exported function "nope"`) {
		t.Fatalf("err = %v", err)
	}
	var tr *engine.Trap
	if errors.As(err, &tr) {
		t.Fatalf("a missing export is not a trap: %v", err)
	}
	if err := f.Inst.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.Inst.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// testParamCount: a call with the wrong number of params is refused
// before anything runs, with wazero's wording, and the instance stays
// usable (an engine that calls unchecked must count them itself).
func testParamCount(t *testing.T, ctor Ctor) {
	f := NewFixture(t, ctor, engine.EngineConfig{})
	for _, tc := range []struct {
		export string
		params []uint64
		reason string
	}{
		{"add", []uint64{1}, "expected 2 params, but passed 1"},
		{"add", []uint64{1, 2, 3}, "expected 2 params, but passed 3"},
		{"wide", nil, "expected 3 params, but passed 0"},
		{"inited", []uint64{1}, "expected 0 params, but passed 1"},
	} {
		_, err := f.Inst.Call(context.Background(), tc.export, tc.params...)
		var tr *engine.Trap
		if !errors.As(err, &tr) || tr.Reason != tc.reason {
			t.Fatalf("%s%v: err = %v, want trap %q", tc.export, tc.params, err, tc.reason)
		}
	}
	if got := f.call(t, "add", 40, 2); got != 42 {
		t.Fatalf("add after refused calls = %d", got)
	}
}

// testUseAfterClose: using a closed instance or engine is an error, never
// a panic ("nothing panics out of the host").
func testUseAfterClose(t *testing.T, ctor Ctor) {
	ctx := context.Background()
	f := NewFixture(t, ctor, engine.EngineConfig{})
	f.call(t, "add", 1, 2)
	if err := f.Inst.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, export := range []string{"add", "inited"} { // cached and not
		_, err := f.Inst.Call(ctx, export, 1, 2)
		var tr *engine.Trap
		if !errors.As(err, &tr) || tr.Reason != "instance is closed" {
			t.Fatalf("%s on a closed instance: %v", export, err)
		}
	}
	if err := f.Eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Eng.Compile(ctx, SuiteWasm); err == nil {
		t.Fatal("Compile after engine Close succeeded")
	}
	if in, err := f.Mod.Instantiate(ctx, engine.InstanceConfig{Name: "late"}); err == nil {
		in.Close(ctx)
		t.Fatal("Instantiate after engine Close succeeded")
	}
}

// TestcapDir is the Go conformance capsule's directory, relative to an
// engine package's directory (host/engine/<engine>), where go test runs
// that package's benchmarks.
const TestcapDir = "../../../capsules/testcap"

// GoGuest returns the Go conformance capsule (TestcapDir/testcap.wasm) and
// a trapping stub for each of its non-WASI imports, so a benchmark measures
// the engine alone, not the process bindings. ctor only lists the imports.
// It skips, loudly, when the capsule is not built.
func GoGuest(b testing.TB, ctor Ctor) ([]byte, []engine.HostFunc) {
	b.Helper()
	wasm, err := os.ReadFile(TestcapDir + "/testcap.wasm")
	if err != nil {
		b.Skipf("SKIPPED LOUDLY: the Go conformance capsule is not built (capsules/build.sh testcap): %v", err)
	}
	ctx := context.Background()
	eng, err := ctor(ctx, engine.EngineConfig{}, nil)
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

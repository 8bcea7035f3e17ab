//go:build wasmtime

// Package wasmtime implements the host's engine seam on wasmtime-go v25
// (cgo, prebuilt static libwasmtime). It is compiled only with the build
// tag "wasmtime", so a CGO_ENABLED=0 build never sees it.
//
// Behaviour matches host/engine/wazero exactly: same trap reasons, same
// error classes, same WASI surface. Why these choices (RFC.md §5):
//   - host functions are defined unchecked on the linker's raw pointer
//     (wasmtime-go's FuncNew converts every value through []Val and looks
//     up its store data on each crossing): one C-to-Go crossing with raw
//     values; the calling instance is found from the caller's store
//     context in a map, and its memory and cabi_realloc are resolved once
//     per instance (rawcall.go);
//   - exports and cabi_realloc are called unchecked, typed once at lookup,
//     in one cgo crossing that also renews the epoch deadline (rawcall.go;
//     wasmtime-go's Func.Call re-reads the type on every call);
//   - deadlines and cancellation use epoch interruption: one ticker per
//     engine bumps the epoch while any call runs, and a per-store epoch
//     callback checks that call's ctx on each tick (epoch.go);
//   - memory limits use the store limiter; fuel is off (it slows every
//     host call and the wall-clock deadline already bounds CPU);
//   - WASI preview1 is wasmtime's own (no preopens, empty args and env),
//     except fd_write, which this package implements so stdout/stderr go
//     synchronously, in order, to the InstanceConfig writers with no
//     files or pipes (wasmtime-go only takes file paths).
package wasmtime

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bytecodealliance/wasmtime-go/v25"

	"github.com/capsule-host/capsule-host/host/engine"
)

// Name is the engine's name in host configuration.
const Name = "wasmtime"

const wasiModule = "wasi_snapshot_preview1"

// epochTick is the interrupt granularity: a cancelled or expired call
// stops within about one tick. Each tick costs one C→Go callback per
// running call, so 5 ms is well below 0.1% overhead.
const epochTick = 5 * time.Millisecond

type eng struct {
	we     *wasmtime.Engine
	linker *wasmtime.Linker
	cache  *moduleCache
	limit  uint32 // pages; 0: none

	// stores maps a store's context pointer to its instance, so a host
	// function finds its instance (ctx, cached memory) from the Caller.
	stores sync.Map // unsafe.Pointer → *instance

	active     atomic.Int64 // calls in flight; the ticker runs while > 0
	wake       chan struct{}
	done       chan struct{} // closed by Close
	tickerDone chan struct{} // closed when the ticker has exited
	closeOnce  sync.Once
	closed     atomic.Bool
}

// New creates a wasmtime engine with the host functions and WASI linked in.
func New(ctx context.Context, cfg engine.EngineConfig, funcs []engine.HostFunc) (engine.Engine, error) {
	if !storeLayoutOK {
		return nil, errors.New("wasmtime: this wasmtime-go version's Store layout is not the one this package was written for (v25)")
	}
	if !linkerLayoutOK || !externLayoutOK {
		return nil, errors.New("wasmtime: this wasmtime-go version's Linker or wasmtime_extern_t layout is not the one this package was written for (v25)")
	}
	if cfg.MemoryLimitPages > 65536 {
		return nil, fmt.Errorf("wasmtime: memory limit %d pages exceeds the wasm32 maximum 65536", cfg.MemoryLimitPages)
	}
	wc := wasmtime.NewConfig()
	wc.SetEpochInterruption(true)
	wc.SetConsumeFuel(false)
	wc.SetWasmThreads(false) // wazero does not run shared-memory guests either
	e := &eng{
		we:         wasmtime.NewEngineWithConfig(wc),
		limit:      cfg.MemoryLimitPages,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		tickerDone: make(chan struct{}),
	}
	if cfg.CacheDir != "" {
		e.cache = &moduleCache{dir: cfg.CacheDir, config: configDigest()}
	}
	e.linker = wasmtime.NewLinker(e.we)
	if err := e.link(funcs); err != nil {
		e.linker.Close()
		e.we.Close()
		return nil, err
	}
	// The ticker is the only other user of e.we; Close waits for it.
	go e.ticker()
	return e, nil
}

func (e *eng) link(funcs []engine.HostFunc) error {
	seen := map[[2]string]bool{}
	for _, f := range funcs {
		if f.Module == "" || f.Name == "" || f.Fn == nil {
			return fmt.Errorf("wasmtime: host function %q %q: module, name and Fn are required", f.Module, f.Name)
		}
		if f.Module == wasiModule {
			return fmt.Errorf("wasmtime: host function %q %q: module %s is provided by the engine", f.Module, f.Name, wasiModule)
		}
		k := [2]string{f.Module, f.Name}
		if seen[k] {
			return fmt.Errorf("wasmtime: host function %q %q registered twice", f.Module, f.Name)
		}
		seen[k] = true
		if err := e.define(f); err != nil {
			return fmt.Errorf("wasmtime: host function %q %q: %w", f.Module, f.Name, err)
		}
	}
	if err := e.linker.DefineWasi(); err != nil {
		return fmt.Errorf("wasmtime: WASI preview1: %w", err)
	}
	// fd_write replaces wasmtime's: output goes to the instance's writers.
	e.linker.AllowShadowing(true)
	if err := e.define(engine.HostFunc{
		Module: wasiModule, Name: "fd_write",
		Params: []engine.ValueType{engine.I32, engine.I32, engine.I32, engine.I32}, Results: []engine.ValueType{engine.I32},
		Fn: fdWrite,
	}); err != nil {
		return fmt.Errorf("wasmtime: WASI fd_write: %w", err)
	}
	e.linker.AllowShadowing(false)
	return nil
}

func fromKinds(vs []*wasmtime.ValType) []engine.ValueType {
	out := make([]engine.ValueType, len(vs))
	for i, v := range vs {
		switch v.Kind() {
		case wasmtime.KindI32:
			out[i] = engine.I32
		case wasmtime.KindI64:
			out[i] = engine.I64
		case wasmtime.KindF32:
			out[i] = engine.F32
		case wasmtime.KindF64:
			out[i] = engine.F64
		default:
			out[i] = engine.ValueType(0) // reference types: rendered "valtype(0x0)"
		}
	}
	return out
}

// runHost runs fn, turning a panic into the *engine.Trap wazero would
// report for it.
func (in *instance) runHost(fn func(context.Context, engine.Caller, []uint64), stack []uint64) (trap *engine.Trap) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch v := r.(type) {
		case *engine.Trap:
			trap = v
		case runtime.Error:
			trap = &engine.Trap{Reason: "host function panicked: " + v.Error()}
		case error:
			trap = &engine.Trap{Reason: firstLine(v.Error())}
		default:
			trap = &engine.Trap{Reason: firstLine(fmt.Sprint(v))}
		}
	}()
	ctx := in.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	fn(ctx, in, stack)
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// ticker bumps the engine epoch every epochTick while any call runs, and
// sleeps otherwise: an idle host has no timer wakeups.
func (e *eng) ticker() {
	defer close(e.tickerDone)
	for {
		select {
		case <-e.done:
			return
		case <-e.wake:
		}
		t := time.NewTicker(epochTick)
		for e.active.Load() > 0 {
			select {
			case <-e.done:
				t.Stop()
				return
			case <-t.C:
				e.we.IncrementEpoch()
			}
		}
		t.Stop()
	}
}

func (e *eng) enter() {
	if e.active.Add(1) == 1 {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

func (e *eng) exit() { e.active.Add(-1) }

func (e *eng) Name() string { return Name }

// errClosed is returned for use after Close (wasmtime-go would panic).
var errClosed = errors.New("wasmtime: engine is closed")

func (e *eng) Compile(ctx context.Context, wasm []byte) (engine.Module, error) {
	if e.closed.Load() {
		return nil, errClosed
	}
	wm, err := e.compileCached(wasm)
	if err != nil {
		return nil, fmt.Errorf("wasmtime: compile: %s", firstLine(err.Error()))
	}
	m := &module{e: e, m: wm}
	if e.limit > 0 {
		mins, err := definedMemoryMinimums(wasm)
		if err != nil {
			wm.Close()
			return nil, fmt.Errorf("wasmtime: compile: %w", err)
		}
		for _, mn := range mins {
			if mn > uint64(e.limit) {
				wm.Close()
				return nil, fmt.Errorf("wasmtime: compile: memory min %d pages exceeds the limit of %d pages", mn, e.limit)
			}
		}
	}
	for _, it := range wm.Imports() {
		et := it.Type()
		if mt := et.MemoryType(); mt != nil {
			if err := e.checkMemory(mt); err != nil {
				wm.Close()
				return nil, err
			}
		}
		ft := et.FuncType()
		if ft == nil {
			continue
		}
		name := ""
		if n := it.Name(); n != nil {
			name = *n
		}
		m.imports = append(m.imports, engine.FuncDef{Module: it.Module(), Name: name, Params: fromKinds(ft.Params()), Results: fromKinds(ft.Results())})
	}
	for _, ex := range wm.Exports() {
		et := ex.Type()
		if mt := et.MemoryType(); mt != nil {
			if err := e.checkMemory(mt); err != nil {
				wm.Close()
				return nil, err
			}
		}
		ft := et.FuncType()
		if ft == nil {
			continue
		}
		m.exports = append(m.exports, engine.FuncDef{Name: ex.Name(), Params: fromKinds(ft.Params()), Results: fromKinds(ft.Results())})
		if ex.Name() == "_initialize" {
			m.hasInit = true
		}
	}
	sort.Slice(m.exports, func(i, j int) bool { return m.exports[i].Name < m.exports[j].Name })
	return m, nil
}

// checkMemory refuses at compile time a memory whose minimum already
// exceeds the limit, as wazero does (the store limiter alone would only
// refuse it at instantiation).
func (e *eng) checkMemory(mt *wasmtime.MemoryType) error {
	if e.limit == 0 {
		return nil
	}
	if mn := mt.Minimum(); mn > uint64(e.limit) {
		return fmt.Errorf("wasmtime: compile: memory min %d pages exceeds the limit of %d pages", mn, e.limit)
	}
	return nil
}

func (e *eng) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		close(e.done)
		<-e.tickerDone // no IncrementEpoch on a closed engine
		e.linker.Close()
		// The engine is reference-counted inside wasmtime: live modules and
		// stores keep it alive until they are closed.
		e.we.Close()
	})
	return nil
}

type module struct {
	e                *eng
	m                *wasmtime.Module
	imports, exports []engine.FuncDef
	hasInit          bool
}

func (m *module) Imports() []engine.FuncDef { return m.imports }
func (m *module) Exports() []engine.FuncDef { return m.exports }

func (m *module) Instantiate(ctx context.Context, cfg engine.InstanceConfig) (engine.Instance, error) {
	e := m.e
	if e.closed.Load() {
		return nil, errClosed
	}
	store := wasmtime.NewStore(e.we)
	if limit := instanceLimit(e.limit, cfg.MemoryLimitPages); limit > 0 {
		store.Limiter(int64(limit)*65536, -1, -1, -1, -1)
	}
	// No args, no env, no preopens, no stdin; stdout/stderr are fdWrite's.
	store.SetWasi(wasmtime.NewWasiConfig())
	in := &instance{
		e: e, name: cfg.Name, store: store,
		stdout: cfg.Stdout, stderr: cfg.Stderr,
		fns: map[string]*export{},
	}
	in.handle = cgo.NewHandle(in)
	setEpochCallback(store, in.handle)
	in.key = unsafe.Pointer(store.Context())
	e.stores.Store(in.key, in)

	in.ctx = ctx
	e.enter()
	store.SetEpochDeadline(1)
	inst, err := e.linker.Instantiate(store, m.m)
	e.exit()
	in.ctx = nil
	if err != nil {
		cerr := in.convertErr(ctx, err)
		in.Close(ctx)
		return nil, fmt.Errorf("wasmtime: instantiate %s: %w", cfg.Name, cerr)
	}
	in.inst = inst
	in.realloc, in.reallocErr = reallocOf(store, inst)
	if ex := inst.GetExport(store, "memory"); ex != nil {
		if in.mem = ex.Memory(); in.mem != nil {
			in.raw.setMemory(in.mem)
		}
	}
	if m.hasInit {
		if _, err := in.Call(ctx, "_initialize"); err != nil {
			in.Close(ctx)
			return nil, fmt.Errorf("wasmtime: %s: _initialize: %w", cfg.Name, err)
		}
	}
	return in, nil
}

func (m *module) Close(ctx context.Context) error {
	m.m.Close()
	return nil
}

// instanceLimit is an instance's memory limit in pages: its own when it
// is below the engine's (0: none).
func instanceLimit(engine, inst uint32) uint32 {
	if inst > 0 && (engine == 0 || inst < engine) {
		return inst
	}
	return engine
}

// instance is one store with one guest instance; it is also the
// engine.Caller its host functions see. Everything a host function
// touches (memory, cabi_realloc) goes through key, the store's context
// pointer, which is also the context wasmtime gives a host function's
// caller; wasmtime-go's Store is used only outside calls.
type instance struct {
	e      *eng
	name   string
	store  *wasmtime.Store
	inst   *wasmtime.Instance
	mem    *wasmtime.Memory
	fns    map[string]*export
	handle cgo.Handle
	key    unsafe.Pointer

	stdout, stderr interface{ Write([]byte) (int, error) }

	// Per call (instances are never used concurrently).
	ctx         context.Context
	hostTrap    *engine.Trap
	interrupted bool

	raw        rawBufs
	realloc    *export
	reallocErr *engine.Trap // why realloc is nil
	closed     bool
	closeOnce  sync.Once
}

func (in *instance) Memory() engine.Memory { return memory{in} }

func (in *instance) Realloc(ctx context.Context, oldPtr, oldSize, align, newSize uint32) (uint32, error) {
	if in.closed {
		return 0, &engine.Trap{Reason: "instance is closed"}
	}
	if in.realloc == nil {
		return 0, in.reallocErr
	}
	vals := in.raw.realloc[:]
	if o := in.call(in.realloc, vals, false, []uint64{uint64(oldPtr), uint64(oldSize), uint64(align), uint64(newSize)}); failed(o) {
		return 0, in.failure(ctx, readFailure(o))
	}
	return uint32(result(engine.I32, vals[0])), nil
}

// reallocOf finds and types cabi_realloc once, at instantiation, outside
// any call: or the trap Realloc returns instead.
func reallocOf(s wasmtime.Storelike, inst *wasmtime.Instance) (*export, *engine.Trap) {
	fn := inst.GetFunc(s, "cabi_realloc")
	if fn == nil {
		return nil, &engine.Trap{Reason: "guest does not export cabi_realloc"}
	}
	ex, err := newExport(s, fn)
	if err != nil || !slices.Equal(ex.params, reallocParams) || !slices.Equal(ex.results, reallocResults) {
		return nil, &engine.Trap{Reason: "cabi_realloc has the wrong signature"}
	}
	return ex, nil
}

var (
	reallocParams  = []engine.ValueType{engine.I32, engine.I32, engine.I32, engine.I32}
	reallocResults = []engine.ValueType{engine.I32}
)

// Call runs an export through the raw call (rawcall.go): its type was
// read at lookup, so a call is one cgo crossing and one allocation (the
// results).
func (in *instance) Call(ctx context.Context, name string, params ...uint64) ([]uint64, error) {
	if in.closed {
		return nil, &engine.Trap{Reason: "instance is closed"}
	}
	ex, err := in.export(name)
	if err != nil {
		return nil, err
	}
	if len(params) != len(ex.params) {
		// wazero's wording, and like wazero before anything runs.
		return nil, &engine.Trap{Reason: fmt.Sprintf("expected %d params, but passed %d", len(ex.params), len(params))}
	}
	if err := ctx.Err(); err != nil {
		// wazero closes a module whose call ctx is already done.
		in.closed = true
		return nil, fmt.Errorf("%w: %w", engine.ErrInterrupted, err)
	}
	vals := in.raw.buf(max(len(ex.params), len(ex.results), 1))
	in.ctx, in.hostTrap, in.interrupted = ctx, nil, false
	in.e.enter()
	o := in.call(ex, vals, true, params)
	in.e.exit()
	in.ctx = nil
	if failed(o) {
		return nil, in.failure(ctx, readFailure(o))
	}
	if len(ex.results) == 0 {
		return nil, nil
	}
	out := make([]uint64, len(ex.results))
	for i, t := range ex.results {
		out[i] = result(t, vals[i])
	}
	return out, nil
}

// export is the named export, looked up and typed once per instance.
func (in *instance) export(name string) (*export, error) {
	if ex, ok := in.fns[name]; ok {
		return ex, nil
	}
	fn := in.inst.GetFunc(in.store, name)
	if fn == nil {
		return nil, fmt.Errorf("wasmtime: %s: no exported function %q", in.name, name)
	}
	ex, err := newExport(in.store, fn)
	if err != nil {
		return nil, fmt.Errorf("wasmtime: %s: export %q: %w", in.name, name, err)
	}
	in.fns[name] = ex
	return ex, nil
}

// trapReasons are wazero's wording for each wasmtime trap code, so the
// operator sees the same reason whichever engine runs.
var trapReasons = map[wasmtime.TrapCode]string{
	wasmtime.StackOverflow:          "stack overflow",
	wasmtime.MemoryOutOfBounds:      "out of bounds memory access",
	wasmtime.HeapMisaligned:         "unaligned atomic",
	wasmtime.TableOutOfBounds:       "invalid table access",
	wasmtime.IndirectCallToNull:     "invalid table access",
	wasmtime.BadSignature:           "indirect call type mismatch",
	wasmtime.IntegerOverflow:        "integer overflow",
	wasmtime.IntegerDivisionByZero:  "integer divide by zero",
	wasmtime.BadConversionToInteger: "invalid conversion to integer",
	wasmtime.UnreachableCodeReached: "unreachable",
}

// failure is what the host needs of a failed call's wasmtime trap or
// error, read out and freed: the C object is gone when this exists.
type failure struct {
	hasCode, hasExit bool
	code             wasmtime.TrapCode
	exit             int32
	msg              string
}

// convertErr maps an error of wasmtime-go's (instantiation) as failure
// does.
func (in *instance) convertErr(ctx context.Context, err error) error {
	return in.failure(ctx, failureOf(err))
}

// failureOf reads and frees a wasmtime-go error. The wasmtime trap or
// error must be freed now: its backtrace keeps the module alive (compiled
// code, memory image memfd) after Module.Close and Engine.Close, until a
// GC happens to run its finalizer.
func failureOf(err error) failure {
	defer freeErr(err)
	var f failure
	var wt *wasmtime.Trap
	var we *wasmtime.Error
	switch {
	case errors.As(err, &wt):
		if c := wt.Code(); c != nil {
			f.hasCode, f.code = true, *c
		}
		f.msg = wt.Message()
	case errors.As(err, &we):
		f.exit, f.hasExit = we.ExitStatus()
		f.msg = we.Error()
	default:
		f.msg = err.Error()
	}
	return f
}

// failure maps a failed call onto the seam's classes: the host's own
// *Trap (from a host function), ErrInterrupted for a ctx that ended, and
// a *Trap with wazero's reason for everything else.
func (in *instance) failure(ctx context.Context, f failure) error {
	if t := in.hostTrap; t != nil {
		in.hostTrap = nil
		return t
	}
	if in.interrupted {
		in.interrupted = false
		in.closed = true // as wazero: a module interrupted by its ctx is closed
		cerr := ctx.Err()
		if cerr == nil {
			cerr = context.Canceled
		}
		return fmt.Errorf("%w: %w", engine.ErrInterrupted, cerr)
	}
	if f.hasCode {
		if f.code == wasmtime.Interrupt {
			in.closed = true
			return fmt.Errorf("%w: %w", engine.ErrInterrupted, context.DeadlineExceeded)
		}
		if r, ok := trapReasons[f.code]; ok {
			return &engine.Trap{Reason: r}
		}
	}
	if f.hasExit {
		in.closed = true // as wazero: proc_exit closes the module
		return &engine.Trap{Reason: fmt.Sprintf("guest exited with code %d", uint32(f.exit))}
	}
	return &engine.Trap{Reason: trimTrap(f.msg)}
}

// freeErr frees the wasmtime object behind err, if any.
func freeErr(err error) {
	var wt *wasmtime.Trap
	if errors.As(err, &wt) {
		wt.Close()
	}
	var we *wasmtime.Error
	if errors.As(err, &we) {
		we.Close()
	}
}

func trimTrap(msg string) string {
	msg = firstLine(msg)
	msg = strings.TrimPrefix(msg, "wasm trap: ")
	return msg
}

func (in *instance) Close(ctx context.Context) error {
	in.closeOnce.Do(func() {
		in.closed = true
		in.raw.guestRan() // the span dies with the store
		in.e.stores.Delete(in.key)
		in.store.Close()
		in.handle.Delete()
	})
	return nil
}

// memory reads the instance's exported memory through memData (one
// crossing per stretch of host code); copies in and out so no slice of
// guest memory outlives a call.
type memory struct{ in *instance }

func (m memory) data() []byte {
	if m.in.mem == nil || m.in.closed {
		return nil
	}
	return m.in.memData()
}

func (m memory) Read(off, n uint32) ([]byte, bool) {
	if m.in.mem == nil {
		return nil, n == 0
	}
	d := m.data()
	if uint64(off)+uint64(n) > uint64(len(d)) {
		return nil, false
	}
	c := make([]byte, n) // not append: growslice costs a fifth of a string import
	copy(c, d[off:off+n])
	return c, true
}

func (m memory) Write(off uint32, b []byte) bool {
	if m.in.mem == nil {
		return len(b) == 0
	}
	d := m.data()
	if uint64(off)+uint64(len(b)) > uint64(len(d)) {
		return false
	}
	copy(d[off:], b)
	return true
}

func (m memory) Size() uint32 {
	if m.in.mem == nil || m.in.closed {
		return 0
	}
	return uint32(len(m.in.memData()))
}

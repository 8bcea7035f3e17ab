// Package wazero implements the host's engine seam on wazero, the pure-Go
// default engine.
//
// Why these choices (see RFC.md §4):
//   - host functions use WithGoModuleFunction with explicit value types:
//     the reflective WithFunc costs 6–20× more per crossing;
//   - guests are reactors: instantiated anonymously with no start
//     function, then "_initialize" is called if exported (a Go wasip1
//     c-shared guest traps in runtime.notInitialized otherwise);
//   - WithCloseOnContextDone(true) lets a call's deadline interrupt a
//     spinning guest; wazero closes the module, so the host discards it;
//   - WASI preview1 comes from wazero's own implementation with empty args
//     and env, real clocks and random, and no filesystem at all.
package wazero

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/capsule-host/capsule-host/host/engine"
)

// Name is the engine's name in host configuration.
const Name = "wazero"

// wasiModule is the only non-WIT import module the guests get.
const wasiModule = wasi_snapshot_preview1.ModuleName

type eng struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache
	fc    *fileCache // nil: no file cache
	limit uint32     // pages; 0: none
	// closing: Close has begun. It closes every module, calls in flight
	// or not, so a memory freed then keeps its reservation (see Free).
	closing atomic.Bool

	// emptyModule resolves the import module names a Store is not given.
	emptyModule wazero.CompiledModule
	mu          sync.Mutex
	reexports   map[string]wazero.CompiledModule // by module bytes
}

// New creates a wazero runtime with the host functions linked in, one host
// module per WIT module name, plus WASI preview1.
func New(ctx context.Context, cfg engine.EngineConfig, funcs []engine.HostFunc) (engine.Engine, error) {
	rc := wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(true)
	if cfg.MemoryLimitPages > 0 {
		if cfg.MemoryLimitPages > 65536 {
			return nil, fmt.Errorf("wazero: memory limit %d pages exceeds the wasm32 maximum 65536", cfg.MemoryLimitPages)
		}
		rc = rc.WithMemoryLimitPages(cfg.MemoryLimitPages)
	}
	e := &eng{limit: cfg.MemoryLimitPages, reexports: map[string]wazero.CompiledModule{}}
	if cfg.CacheDir != "" {
		c, fc, err := openFileCache(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wazero: compilation cache %q: %w", cfg.CacheDir, err)
		}
		e.cache, e.fc = c, fc
		rc = rc.WithCompilationCache(c)
	}
	e.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	if err := e.link(ctx, funcs); err != nil {
		_ = e.Close(ctx)
		return nil, err
	}
	empty, err := e.compileModule(ctx, []byte("\x00asm\x01\x00\x00\x00"))
	if err != nil {
		_ = e.Close(ctx)
		return nil, fmt.Errorf("wazero: empty module: %w", err)
	}
	e.emptyModule = empty
	return e, nil
}

func (e *eng) link(ctx context.Context, funcs []engine.HostFunc) error {
	byModule := map[string][]engine.HostFunc{}
	seen := map[[2]string]bool{}
	for _, f := range funcs {
		if f.Module == "" || f.Name == "" || f.Fn == nil {
			return fmt.Errorf("wazero: host function %q %q: module, name and Fn are required", f.Module, f.Name)
		}
		if f.Module == wasiModule {
			return fmt.Errorf("wazero: host function %q %q: module %s is provided by the engine", f.Module, f.Name, wasiModule)
		}
		k := [2]string{f.Module, f.Name}
		if seen[k] {
			return fmt.Errorf("wazero: host function %q %q registered twice", f.Module, f.Name)
		}
		seen[k] = true
		byModule[f.Module] = append(byModule[f.Module], f)
	}
	mods := make([]string, 0, len(byModule))
	for m := range byModule {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	for _, m := range mods {
		b := e.rt.NewHostModuleBuilder(m)
		for _, f := range byModule[m] {
			params, err := valueTypes(f.Params)
			if err != nil {
				return fmt.Errorf("wazero: host function %q %q: %w", f.Module, f.Name, err)
			}
			results, err := valueTypes(f.Results)
			if err != nil {
				return fmt.Errorf("wazero: host function %q %q: %w", f.Module, f.Name, err)
			}
			names := make([]string, len(params))
			for i := range names {
				names[i] = fmt.Sprintf("p%d", i)
			}
			b.NewFunctionBuilder().
				WithGoModuleFunction(hostFunc(f.Fn), params, results).
				WithParameterNames(names...).
				Export(f.Name)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return fmt.Errorf("wazero: host module %q: %w", m, err)
		}
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, e.rt); err != nil {
		return fmt.Errorf("wazero: WASI preview1: %w", err)
	}
	return nil
}

func valueTypes(vs []engine.ValueType) ([]api.ValueType, error) {
	out := make([]api.ValueType, len(vs))
	for i, v := range vs {
		switch v {
		case engine.I32, engine.I64, engine.F32, engine.F64:
			out[i] = api.ValueType(v) // same encoding as the binary format
		default:
			return nil, fmt.Errorf("unsupported value type %v", v)
		}
	}
	return out, nil
}

func fromAPI(vs []api.ValueType) []engine.ValueType {
	out := make([]engine.ValueType, len(vs))
	for i, v := range vs {
		out[i] = engine.ValueType(v)
	}
	return out
}

// hostFunc adapts an engine.HostFunc body. The Caller is the instance the
// current Call put into ctx; a call reaching us some other way (none does
// today) gets a fresh, uncached caller for the module.
func hostFunc(fn func(context.Context, engine.Caller, []uint64)) api.GoModuleFunc {
	return func(ctx context.Context, m api.Module, stack []uint64) {
		if in, ok := ctx.Value(instKey{}).(*instance); ok && in.mod == m {
			fn(ctx, in, stack)
			return
		}
		fn(ctx, &instance{mod: m, mem: memory{m.Memory()}}, stack)
	}
}

func (e *eng) Name() string { return Name }

func (e *eng) Compile(ctx context.Context, wasm []byte) (engine.Module, error) {
	cm, err := e.compileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("wazero: compile: %w", err)
	}
	m := &module{rt: e.rt, cm: cm, limit: e.limit, closing: &e.closing}
	if m.externImports, m.exportKinds, err = externs(wasm); err != nil {
		_ = cm.Close(ctx)
		return nil, fmt.Errorf("wazero: compile: %w", err)
	}
	for _, d := range cm.ImportedFunctions() {
		mod, name, _ := d.Import()
		m.imports = append(m.imports, engine.FuncDef{Module: mod, Name: name, Params: fromAPI(d.ParamTypes()), Results: fromAPI(d.ResultTypes())})
	}
	// ExportedFunctions is keyed by the export name; FunctionDefinition.Name
	// is the debug name, not the export name.
	exp := cm.ExportedFunctions()
	names := make([]string, 0, len(exp))
	for n := range exp {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := exp[n]
		m.exports = append(m.exports, engine.FuncDef{Name: n, Params: fromAPI(d.ParamTypes()), Results: fromAPI(d.ResultTypes())})
	}
	_, m.hasInit = exp["_initialize"]
	return m, nil
}

// compileModule is every compile of the engine: through the file cache's
// guard when there is one.
func (e *eng) compileModule(ctx context.Context, wasm []byte) (wazero.CompiledModule, error) {
	if e.fc == nil {
		return e.rt.CompileModule(ctx, wasm)
	}
	return e.fc.compile(ctx, wasm, func() (wazero.CompiledModule, error) { return e.rt.CompileModule(ctx, wasm) })
}

func (e *eng) Close(ctx context.Context) error {
	e.closing.Store(true)
	err := e.rt.Close(ctx)
	if e.cache != nil {
		err = errors.Join(err, e.cache.Close(ctx))
	}
	return err
}

type module struct {
	rt               wazero.Runtime
	cm               wazero.CompiledModule
	imports, exports []engine.FuncDef
	hasInit          bool
	limit            uint32 // the engine's, pages
	closing          *atomic.Bool
	// Every import and export of every kind, for Store.Instantiate.
	externImports []engine.ExternDef
	exportKinds   map[string]engine.ExternKind
}

func externs(wasm []byte) ([]engine.ExternDef, map[string]engine.ExternKind, error) {
	imps, exps, err := engine.CoreExterns(wasm)
	if err != nil {
		return nil, nil, err
	}
	kinds := make(map[string]engine.ExternKind, len(exps))
	for _, d := range exps {
		kinds[d.Name] = d.Kind
	}
	return imps, kinds, nil
}

func (m *module) Imports() []engine.FuncDef { return m.imports }
func (m *module) Exports() []engine.FuncDef { return m.exports }

func (m *module) Instantiate(ctx context.Context, cfg engine.InstanceConfig) (engine.Instance, error) {
	mc := wazero.NewModuleConfig().
		WithName("").         // anonymous: many instances of one module coexist
		WithStartFunctions(). // reactor: no _start; _initialize below
		WithSysWalltime().
		WithSysNanotime().
		WithSysNanosleep().
		WithRandSource(rand.Reader).
		WithStdout(writerOrDiscard(cfg.Stdout)).
		WithStderr(writerOrDiscard(cfg.Stderr))
	ictx, lm := ctx, (*limitedMemory)(nil)
	if p := instanceLimit(m.limit, cfg.MemoryLimitPages); p > 0 {
		ictx, lm = withLimitedMemory(ctx, uint64(p)*65536, m.closing)
	}
	mod, err := m.rt.InstantiateModule(ictx, m.cm, mc)
	if err != nil {
		return nil, fmt.Errorf("wazero: instantiate %s: %w", cfg.Name, err)
	}
	if lm != nil && lm.over {
		_ = mod.Close(ctx)
		return nil, fmt.Errorf("wazero: instantiate %s: memory min exceeds the instance limit of %d pages", cfg.Name, cfg.MemoryLimitPages)
	}
	in := &instance{name: cfg.Name, mod: mod, mem: memory{mod.Memory()}, fns: map[string]api.Function{}}
	if m.hasInit {
		if _, err := in.Call(ctx, "_initialize"); err != nil {
			_ = mod.Close(ctx)
			return nil, fmt.Errorf("wazero: %s: _initialize: %w", cfg.Name, err)
		}
	}
	return in, nil
}

// limitedMemory backs the linear memory of an instance whose limit is
// below the engine's: wazero's runtime-wide limit is applied when a
// module compiles, so a per-instance one is enforced here, where
// memory.grow asks for bytes. A refused grow returns nil, which the
// guest sees as -1, exactly as at the engine's limit.
//
// Why reserve the whole limit at once (reserve, mmap with MAP_NORESERVE):
// a grow that copies cannot be interrupted, and the copy is what makes a
// grow slow (a 37.8 s call for a 30 s timeout at 4 GiB; 22 ms of a 500-
// process list at 256 MiB). A reservation grows by reslicing, at a fixed
// address, and costs RSS only for the pages the guest touches; Free
// unmaps it, so a discarded instance's memory goes back to the system at
// once, not when the Go heap gets round to it. Where the reservation is
// refused (strict overcommit, another OS) the Go slice doubles as before.
type limitedMemory struct {
	buf     []byte
	region  []byte // the reservation buf is a prefix of; nil: a Go slice
	closing *atomic.Bool
	limit   uint64 // bytes
	started bool
	// over: the memory's minimum is above the limit. The first allocation
	// cannot be refused (wazero requires the minimum), so Instantiate
	// refuses the instance instead.
	over bool
	// budget, in a Store, is shared by every memory of the store: a
	// component's core instances together stay within the one instance
	// limit a core module gets (nil: this memory alone).
	budget *memBudget
}

// memBudget is the bytes every memory of one Store may hold together.
type memBudget struct{ limit, used uint64 }

// withLimitedMemory makes the instance created under the returned ctx
// use a limitedMemory of limit bytes.
func withLimitedMemory(ctx context.Context, limit uint64, closing *atomic.Bool) (context.Context, *limitedMemory) {
	lm := &limitedMemory{limit: limit, closing: closing}
	alloc := experimental.MemoryAllocatorFunc(func(_, _ uint64) experimental.LinearMemory { return lm })
	return experimental.WithMemoryAllocator(ctx, alloc), lm
}

func (m *limitedMemory) Reallocate(size uint64) []byte {
	first := !m.started
	m.started = true
	grow := size - min(size, uint64(len(m.buf)))
	if size > m.limit || m.budget != nil && m.budget.used+grow > m.budget.limit {
		if !first {
			return nil
		}
		m.over = true
	}
	if m.budget != nil {
		m.budget.used += grow
	}
	if first && !m.over {
		m.region, _ = reserve(m.limit) // nil: the Go slice below
	}
	if m.region != nil {
		// Never written past the old length: still zero, as mmap gave it.
		m.buf = m.region[:size]
		return m.buf
	}
	if size <= uint64(cap(m.buf)) {
		// A linear memory never shrinks: the bytes past the old length
		// were never written, so they are still zero.
		m.buf = m.buf[:size]
		return m.buf
	}
	nb := make([]byte, size, max(size, min(2*uint64(cap(m.buf)), m.limit)))
	copy(nb, m.buf)
	m.buf = nb
	return nb
}

// Free drops the memory when the instance closes.
func (m *limitedMemory) Free() {
	if m.budget != nil {
		m.budget.used -= min(m.budget.used, uint64(len(m.buf)))
	}
	m.buf = nil
	// The pool closes an instance only between calls, wazero frees a
	// timed-out one only once its call returned: unmapping is safe then.
	// The engine's own Close closes modules under calls still running
	// (a shutdown past its deadline); unmapped, their next access would
	// fault the daemon, so the reservation is left to the exiting process.
	if m.region != nil && !m.closing.Load() {
		release(m.region)
	}
	m.region = nil
}

// instanceLimit is an instance's memory limit in pages: its own when it
// is below the engine's (0: none).
func instanceLimit(engine, inst uint32) uint32 {
	if inst > 0 && (engine == 0 || inst < engine) {
		return inst
	}
	return engine
}

func writerOrDiscard(w interface{ Write([]byte) (int, error) }) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func (m *module) Close(ctx context.Context) error { return m.cm.Close(ctx) }

type instKey struct{}

// instance is one live guest; it is also the engine.Caller its host calls
// see, so the cabi_realloc function and the memory wrapper are looked up
// once per instance, not once per host call.
type instance struct {
	name    string
	mod     api.Module
	mem     memory
	fns     map[string]api.Function
	realloc api.Function
	stack   [4]uint64
}

// Memory points at the instance's memory value: returning the value
// itself would box it into the interface, one allocation per import that
// touches memory (P2, issue 16).
func (in *instance) Memory() engine.Memory { return &in.mem }

func (in *instance) Realloc(ctx context.Context, oldPtr, oldSize, align, newSize uint32) (uint32, error) {
	if in.realloc == nil {
		in.realloc = in.mod.ExportedFunction("cabi_realloc")
		if in.realloc == nil {
			return 0, &engine.Trap{Reason: "guest does not export cabi_realloc"}
		}
	}
	s := in.stack[:]
	s[0], s[1], s[2], s[3] = uint64(oldPtr), uint64(oldSize), uint64(align), uint64(newSize)
	if err := in.realloc.CallWithStack(ctx, s); err != nil {
		return 0, convertErr(err)
	}
	return uint32(s[0]), nil
}

func (in *instance) Call(ctx context.Context, export string, params ...uint64) ([]uint64, error) {
	fn, ok := in.fns[export]
	if !ok {
		fn = in.mod.ExportedFunction(export)
		if fn == nil {
			return nil, fmt.Errorf("wazero: %s: no exported function %q", in.name, export)
		}
		in.fns[export] = fn
	}
	if in.mod.IsClosed() {
		return nil, &engine.Trap{Reason: "instance is closed"}
	}
	res, err := fn.Call(context.WithValue(ctx, instKey{}, in), params...)
	if err != nil {
		return nil, convertErr(err)
	}
	return res, nil
}

func (in *instance) Close(ctx context.Context) error { return in.mod.Close(ctx) }

// convertErr maps wazero's call errors onto the seam's: ErrInterrupted for
// a context that ended, *engine.Trap for everything else, with the reason
// in the wasm spec's wording ("unreachable", "out of bounds memory access").
func convertErr(err error) error {
	var t *engine.Trap
	if errors.As(err, &t) {
		return t
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("%w: %w", engine.ErrInterrupted, context.DeadlineExceeded)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("%w: %w", engine.ErrInterrupted, context.Canceled)
		}
		return &engine.Trap{Reason: fmt.Sprintf("guest exited with code %d", exit.ExitCode())}
	}
	var re runtime.Error
	if errors.As(err, &re) {
		return &engine.Trap{Reason: "host function panicked: " + re.Error()}
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimPrefix(msg, "wasm error: ")
	msg = strings.TrimSuffix(msg, " (recovered by wazero)")
	return &engine.Trap{Reason: msg}
}

// memory copies in and out so no slice of guest memory outlives a call.
type memory struct{ m api.Memory }

func (m memory) Read(off, n uint32) ([]byte, bool) {
	if m.m == nil {
		return nil, n == 0
	}
	b, ok := m.m.Read(off, n)
	if !ok {
		return nil, false
	}
	c := make([]byte, len(b)) // not append: growslice costs a fifth of a string import
	copy(c, b)
	return c, true
}

func (m memory) Write(off uint32, b []byte) bool {
	if m.m == nil {
		return len(b) == 0
	}
	return m.m.Write(off, b)
}

func (m memory) Size() uint32 {
	if m.m == nil {
		return 0
	}
	return m.m.Size()
}

package wazero

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/capsule-host/capsule-host/host/engine"
)

// How a Store links (RFC.md, components): every instance is anonymous, so
// instances of one module in many stores coexist, and its imports are
// resolved by experimental.WithImportResolver, module name by module name.
// An import module whose fields all come from one instance under their
// own names resolves to that instance. Any other (a component's inline
// export bag, a renamed field, host functions) resolves to a re-export
// module generated here: it imports each item from its source and exports
// it under the wanted name, so funcs, tables, memories and globals are the
// source's own, shared, not copies and not trampolines.

// extern is one item of a store.
type extern struct {
	st   *store
	kind engine.ExternKind
	mod  api.Module
	name string
	// fn is the func export, looked up at the first Call: wazero's
	// ExportedFunction makes a new call engine (a ~10 KB stack) each
	// time, which per call was most of a component call's allocations.
	// An extern belongs to one Store, whose calls never overlap.
	fn api.Function
}

func (x *extern) Kind() engine.ExternKind { return x.kind }

type store struct {
	e    *eng
	cfg  engine.InstanceConfig
	mods []api.Module // closed in reverse order
	// budget is the instance's memory limit, shared by all its memories.
	budget *memBudget
	// empty answers every module name the resolver is not given, so
	// nothing falls back to the runtime's named host modules or WASI.
	empty  api.Module
	closed bool
}

type storeInstance struct {
	st      *store
	mod     api.Module
	exports map[string]engine.ExternKind
}

// NewStore implements engine.Linker.
func (e *eng) NewStore(ctx context.Context, cfg engine.InstanceConfig) (engine.Store, error) {
	st := &store{e: e, cfg: cfg}
	empty, err := st.instantiate(ctx, e.emptyModule, nil)
	if err != nil {
		return nil, err
	}
	st.empty = empty
	return st, nil
}

func (s *store) own(x engine.Extern, want engine.ExternKind) (*extern, error) {
	ex, ok := x.(*extern)
	if !ok || ex.st != s {
		return nil, fmt.Errorf("%w: an extern of another store or engine", engine.ErrLink)
	}
	if ex.kind != want {
		return nil, fmt.Errorf("%w: %s %q is a %s, want a %s", engine.ErrLink, ex.kind, ex.name, ex.kind, want)
	}
	return ex, nil
}

func (s *store) Instantiate(ctx context.Context, m engine.Module, imports engine.Imports) (engine.StoreInstance, error) {
	if s.closed {
		return nil, fmt.Errorf("%w: store is closed", engine.ErrLink)
	}
	mod, ok := m.(*module)
	if !ok || mod.rt != s.e.rt {
		return nil, fmt.Errorf("%w: a module of another engine", engine.ErrLink)
	}
	for _, d := range mod.externImports {
		x, ok := imports[d.Module][d.Name]
		if !ok {
			return nil, fmt.Errorf("%w: import %q %q (%s) is not given", engine.ErrLink, d.Module, d.Name, d.Kind)
		}
		if _, err := s.own(x, d.Kind); err != nil {
			return nil, fmt.Errorf("import %q %q: %w", d.Module, d.Name, err)
		}
	}
	resolved := make(map[string]api.Module, len(imports))
	for name, fields := range imports {
		rm, err := s.resolve(ctx, fields)
		if err != nil {
			return nil, fmt.Errorf("import module %q: %w", name, err)
		}
		resolved[name] = rm
	}
	am, err := s.instantiate(ctx, mod.cm, resolved)
	if err != nil {
		return nil, err
	}
	return &storeInstance{st: s, mod: am, exports: mod.exportKinds}, nil
}

// instantiate creates one anonymous instance with its imports resolved
// only against resolved (everything else against the empty module).
func (s *store) instantiate(ctx context.Context, cm wazero.CompiledModule, resolved map[string]api.Module) (api.Module, error) {
	rctx := experimental.WithImportResolver(ctx, func(name string) api.Module {
		if m, ok := resolved[name]; ok {
			return m
		}
		return s.empty
	})
	// A rand source, though no core instance of a Store can reach WASI
	// preview1's random_get: without one wazero seeds a math/rand source
	// per module, a fifth of a C component's instantiation CPU.
	mc := wazero.NewModuleConfig().WithName("").WithStartFunctions().
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().WithRandSource(rand.Reader).
		WithStdout(writerOrDiscard(s.cfg.Stdout)).WithStderr(writerOrDiscard(s.cfg.Stderr))
	lm := (*limitedMemory)(nil)
	if p := instanceLimit(s.e.limit, s.cfg.MemoryLimitPages); p > 0 {
		rctx, lm = withLimitedMemory(rctx, uint64(p)*65536, &s.e.closing)
		if s.budget == nil {
			s.budget = &memBudget{limit: uint64(p) * 65536}
		}
		lm.budget = s.budget
	}
	am, err := s.e.rt.InstantiateModule(rctx, cm, mc)
	if err != nil {
		return nil, fmt.Errorf("wazero: instantiate %s: %w", s.cfg.Name, convertErr(err))
	}
	s.mods = append(s.mods, am)
	if lm != nil && lm.over {
		return nil, fmt.Errorf("wazero: instantiate %s: memory min exceeds the instance limit of %d pages (shared by all the instance's memories)", s.cfg.Name, instanceLimit(s.e.limit, s.cfg.MemoryLimitPages))
	}
	return am, nil
}

// resolve is the api.Module an import module name resolves to.
func (s *store) resolve(ctx context.Context, fields map[string]engine.Extern) (api.Module, error) {
	var src api.Module
	direct := true
	for name, x := range fields {
		ex, ok := x.(*extern)
		if !ok || ex.st != s {
			return nil, fmt.Errorf("%w: field %q: an extern of another store or engine", engine.ErrLink, name)
		}
		if src == nil {
			src = ex.mod
		}
		direct = direct && ex.mod == src && ex.name == name
	}
	if direct && src != nil {
		return src, nil
	}
	return s.reexport(ctx, fields)
}

// reexport instantiates a generated module exporting fields under their
// names, each imported from its source instance.
func (s *store) reexport(ctx context.Context, fields map[string]engine.Extern) (api.Module, error) {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	srcs := map[api.Module]string{}
	resolved := map[string]api.Module{}
	items := make([]reexportItem, 0, len(names))
	for _, n := range names {
		ex := fields[n].(*extern)
		key, ok := srcs[ex.mod]
		if !ok {
			key = fmt.Sprintf("s%d", len(srcs))
			srcs[ex.mod] = key
			resolved[key] = ex.mod
		}
		it, err := describe(ex)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", n, err)
		}
		it.module, it.field, it.export = key, ex.name, n
		items = append(items, it)
	}
	bin, err := reexportModule(items)
	if err != nil {
		return nil, err
	}
	cm, err := s.e.compileReexport(ctx, bin)
	if err != nil {
		return nil, err
	}
	return s.instantiate(ctx, cm, resolved)
}

// describe reads the core type an import of ex must declare.
func describe(ex *extern) (reexportItem, error) {
	it := reexportItem{kind: ex.kind}
	switch ex.kind {
	case engine.ExternFunc:
		f := ex.mod.ExportedFunction(ex.name)
		if f == nil {
			return it, fmt.Errorf("%w: no func export %q", engine.ErrLink, ex.name)
		}
		it.params, it.results = f.Definition().ParamTypes(), f.Definition().ResultTypes()
	case engine.ExternGlobal:
		g := ex.mod.ExportedGlobal(ex.name)
		if g == nil {
			return it, fmt.Errorf("%w: no global export %q", engine.ErrLink, ex.name)
		}
		_, it.mutable = g.(api.MutableGlobal)
		it.valType = g.Type()
	}
	return it, nil
}

func (e *eng) compileReexport(ctx context.Context, bin []byte) (wazero.CompiledModule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cm, ok := e.reexports[string(bin)]; ok {
		return cm, nil
	}
	cm, err := e.compileModule(ctx, bin)
	if err != nil {
		return nil, fmt.Errorf("wazero: re-export module: %w", err)
	}
	e.reexports[string(bin)] = cm
	return cm, nil
}

func (s *store) Funcs(ctx context.Context, fs []engine.HostFunc) ([]engine.Extern, error) {
	if len(fs) == 0 {
		return nil, nil
	}
	b := s.e.rt.NewHostModuleBuilder("store host functions") // instantiated anonymously below
	for i, f := range fs {
		if f.Fn == nil {
			return nil, fmt.Errorf("%w: host function %q %q has no Fn", engine.ErrLink, f.Module, f.Name)
		}
		params, err := valueTypes(f.Params)
		if err != nil {
			return nil, fmt.Errorf("wazero: host function %q %q: %w", f.Module, f.Name, err)
		}
		results, err := valueTypes(f.Results)
		if err != nil {
			return nil, fmt.Errorf("wazero: host function %q %q: %w", f.Module, f.Name, err)
		}
		b.NewFunctionBuilder().WithGoModuleFunction(storeHostFunc(f.Fn), params, results).Export(fmt.Sprintf("f%d", i))
	}
	cm, err := b.Compile(ctx)
	if err != nil {
		return nil, fmt.Errorf("wazero: host functions: %w", err)
	}
	am, err := s.e.rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithRandSource(rand.Reader))
	if err != nil {
		_ = cm.Close(ctx)
		return nil, fmt.Errorf("wazero: host functions: %w", err)
	}
	s.mods = append(s.mods, am)
	out := make([]engine.Extern, len(fs))
	for i := range fs {
		out[i] = &extern{st: s, kind: engine.ExternFunc, mod: am, name: fmt.Sprintf("f%d", i)}
	}
	return out, nil
}

// storeHostFunc gives Fn the calling instance as its Caller.
func storeHostFunc(fn func(context.Context, engine.Caller, []uint64)) api.GoModuleFunc {
	return func(ctx context.Context, m api.Module, stack []uint64) {
		fn(ctx, &instance{mod: m, mem: memory{m.Memory()}}, stack)
	}
}

func (s *store) Call(ctx context.Context, fn engine.Extern, params ...uint64) ([]uint64, error) {
	ex, err := s.own(fn, engine.ExternFunc)
	if err != nil {
		return nil, err
	}
	if ex.mod.IsClosed() {
		return nil, &engine.Trap{Reason: "instance is closed"}
	}
	if ex.fn == nil {
		if ex.fn = ex.mod.ExportedFunction(ex.name); ex.fn == nil {
			return nil, fmt.Errorf("%w: no func export %q", engine.ErrLink, ex.name)
		}
	}
	res, err := ex.fn.Call(ctx, params...)
	if err != nil {
		return nil, convertErr(err)
	}
	return res, nil
}

func (s *store) Memory(x engine.Extern) (engine.Memory, bool) {
	ex, err := s.own(x, engine.ExternMemory)
	if err != nil {
		return nil, false
	}
	m := ex.mod.ExportedMemory(ex.name)
	if m == nil {
		return nil, false
	}
	return memory{m}, true
}

func (s *store) FuncType(x engine.Extern) (params, results []engine.ValueType, ok bool) {
	ex, err := s.own(x, engine.ExternFunc)
	if err != nil {
		return nil, nil, false
	}
	f := ex.mod.ExportedFunction(ex.name)
	if f == nil {
		return nil, nil, false
	}
	return fromAPI(f.Definition().ParamTypes()), fromAPI(f.Definition().ResultTypes()), true
}

func (s *store) Close(ctx context.Context) error {
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	for i := len(s.mods) - 1; i >= 0; i-- {
		err = errors.Join(err, s.mods[i].Close(ctx))
	}
	s.mods = nil
	return err
}

func (si *storeInstance) Export(name string) (engine.Extern, bool) {
	k, ok := si.exports[name]
	if !ok {
		return nil, false
	}
	return &extern{st: si.st, kind: k, mod: si.mod, name: name}, true
}

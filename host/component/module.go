package component

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/capsule-host/capsule-host/host/engine"
)

// HostFuncs gives the host functions one instance of a component may
// lower its imports onto (Module: the interface with its version, Name:
// the function, "[method]r.f" or "[resource-drop]r"). It is called once
// per instance, so functions may hold per-instance state (WASI streams);
// at load it is called with a zero InstanceConfig for the check.
type HostFuncs func(cfg engine.InstanceConfig) []engine.HostFunc

// Module is a component compiled for an engine. It is an engine.Module,
// so the host pools, resets and calls it exactly like a core module:
// its exports are presented under the names a core capsule uses.
type Module struct {
	c       *Component
	linker  engine.Linker
	modules map[*Component][]*coreModule
	funcs   HostFuncs
	imports []engine.FuncDef
	exports []engine.FuncDef
}

// Compile checks c's imports against the host's WIT (wit: a function
// type that differs is a *WITMismatch naming the interface, the function
// and what differs), then compiles every core module of c on eng and
// checks, with no instance made, that the core instance graph links:
// every lowered import is served with the same core type, every core
// import gets an item of its kind and type. eng must implement
// engine.Linker.
func Compile(ctx context.Context, eng engine.Engine, c *Component, funcs HostFuncs, wit WIT) (*Module, error) {
	if err := checkWIT(c, newServedSet(funcs(engine.InstanceConfig{})), wit); err != nil {
		return nil, err
	}
	l, ok := eng.(engine.Linker)
	if !ok {
		return nil, fmt.Errorf("%w: engine %s cannot run components (%w: it keeps one store per instance, "+
			"a component needs several linked); run component capsules on the default engine, wazero "+
			"(--engine wazero, or engine = \"wazero\" in the host config)", ErrUnsupported, eng.Name(), engine.ErrLinkUnsupported)
	}
	m := &Module{c: c, linker: l, modules: map[*Component][]*coreModule{}, funcs: funcs}
	if err := m.compile(ctx, eng, c); err != nil {
		_ = m.Close(ctx)
		return nil, err
	}
	ln := m.newLinker(ctx, nil, engine.InstanceConfig{})
	ln.wit = wit
	top, err := m.evaluate(ln)
	if err == nil {
		err = ln.checkVersions()
	}
	if err != nil {
		_ = m.Close(ctx)
		return nil, err
	}
	m.imports = ln.lowered
	for _, name := range sortedKeys(top.exports) {
		it := top.exports[name]
		m.exports = append(m.exports, engine.FuncDef{Name: name, Params: it.params, Results: it.results})
	}
	return m, nil
}

func (m *Module) compile(ctx context.Context, eng engine.Engine, c *Component) error {
	for _, cm := range c.CoreModules {
		mod, err := eng.Compile(ctx, cm.Bytes)
		if err != nil {
			return fmt.Errorf("core module at offset %#x: %w", cm.Offset, err)
		}
		imps, exps, err := engine.CoreExterns(cm.Bytes)
		if err != nil {
			_ = mod.Close(ctx)
			return fmt.Errorf("core module at offset %#x: %w", cm.Offset, err)
		}
		x := &coreModule{mod: mod, imports: imps, importFuncs: map[[2]string]engine.FuncDef{},
			exportKinds: map[string]engine.ExternKind{}, exportFuncs: map[string]engine.FuncDef{}, goRuntime: producedByGo(cm.Bytes)}
		for _, d := range mod.Imports() {
			x.importFuncs[[2]string{d.Module, d.Name}] = d
		}
		for _, d := range exps {
			x.exportKinds[d.Name] = d.Kind
		}
		for _, d := range mod.Exports() {
			x.exportFuncs[d.Name] = d
		}
		m.modules[c] = append(m.modules[c], x)
	}
	for _, inner := range c.Components {
		if err := m.compile(ctx, eng, inner); err != nil {
			return err
		}
	}
	return nil
}

func (m *Module) newLinker(ctx context.Context, st engine.Store, cfg engine.InstanceConfig) *linker {
	fs := m.funcs(cfg)
	ln := &linker{ctx: ctx, store: st, modules: m.modules, served: newServedSet(fs),
		funcs: map[[2]string]engine.HostFunc{}, res: map[*ownResource]*handles{}}
	for _, f := range fs {
		ln.funcs[[2]string{f.Module, f.Name}] = f
	}
	return ln
}

// surface is what the host sees of an evaluated component: core-capsule
// export names mapped to the lifted core items.
type surface struct {
	exports map[string]coreItem
	memory  coreItem
	hasMem  bool
}

// evaluate runs the component's definitions and maps its exports: an
// exported instance "iface" with function "f" becomes "iface#f" (and
// "cabi_post_iface#f"), an exported function "f" becomes "f"; every lift
// must use one memory and one realloc, exported as "memory" and
// "cabi_realloc", as a core capsule's are.
func (m *Module) evaluate(ln *linker) (*surface, error) {
	top := newEnv(m.c, nil, nil, ln)
	if err := top.run(); err != nil {
		return nil, err
	}
	s := &surface{exports: map[string]coreItem{}}
	for i := range m.c.Exports {
		ex := &m.c.Exports[i]
		v, err := top.value(ex.Sort, ex.Index)
		if err != nil {
			return nil, err
		}
		if err := s.add(ex, ex.Name, "", v); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *surface) add(ex *Export, name, iface string, v any) error {
	switch x := v.(type) {
	case compInst:
		if iface != "" {
			return unsupported("export", ex.Offset, fmt.Sprintf("export %q: an instance nested in an exported instance", ex.Name), "export interfaces of functions")
		}
		for _, k := range sortedKeys(x) {
			if err := s.add(ex, k, name, x[k]); err != nil {
				return err
			}
		}
		return nil
	case *liftRef:
		full := name
		if iface != "" {
			full = iface + "#" + name
		}
		return s.lift(ex, full, x)
	case nil:
		return nil // a type export
	}
	return unsupported("export", ex.Offset, fmt.Sprintf("export %q of a %T", name, v), "export lifted functions and interfaces of them")
}

func (s *surface) lift(ex *Export, full string, l *liftRef) error {
	s.exports[full] = l.core
	if l.hasPost {
		s.exports["cabi_post_"+full] = l.postReturn
	}
	if l.hasAlloc {
		if prev, ok := s.exports["cabi_realloc"]; ok && prev.ext != l.realloc.ext {
			return unsupported("canon", l.offset, "lifted functions with different realloc options", "build the component from one core module")
		}
		s.exports["cabi_realloc"] = l.realloc
	}
	if l.hasMem {
		if s.hasMem && s.memory.ext != l.memory.ext {
			return unsupported("canon", l.offset, "lifted functions with different memories", "build the component from one core module")
		}
		s.memory, s.hasMem = l.memory, true
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Imports are the non-WASI host functions the component lowers, so the
// host checks them against the manifest's declared imports as it does
// a core module's.
func (m *Module) Imports() []engine.FuncDef { return m.imports }

// Exports are the lifted functions under their core-capsule names.
func (m *Module) Exports() []engine.FuncDef { return m.exports }

// Instantiate makes one instance of the component: a new Store in which
// every core instance is instantiated in order. The main module's
// _initialize is run by wit-component's fixup instance's start function,
// as the component's own instantiation says, not by the host.
func (m *Module) Instantiate(ctx context.Context, cfg engine.InstanceConfig) (engine.Instance, error) {
	st, err := m.linker.NewStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ln := m.newLinker(ctx, st, cfg)
	s, err := m.evaluate(ln)
	if err != nil {
		_ = st.Close(ctx)
		return nil, fmt.Errorf("component instance %s: %w", cfg.Name, err)
	}
	in := &Live{name: cfg.Name, st: st, exports: s.exports, mem: noMemory{}}
	if s.hasMem {
		if mem, ok := st.Memory(s.memory.ext); ok {
			in.mem = mem
		}
	}
	return in, nil
}

func (m *Module) Close(ctx context.Context) error {
	var err error
	for _, mods := range m.modules {
		for _, x := range mods {
			err = errors.Join(err, x.mod.Close(ctx))
		}
	}
	return err
}

// Live is one live component instance, an engine.Instance.
type Live struct {
	name    string
	st      engine.Store
	exports map[string]coreItem
	mem     engine.Memory
}

func (in *Live) Call(ctx context.Context, export string, params ...uint64) ([]uint64, error) {
	it, ok := in.exports[export]
	if !ok {
		return nil, fmt.Errorf("component %s: no exported function %q", in.name, export)
	}
	return in.st.Call(ctx, it.ext, params...)
}

func (in *Live) Memory() engine.Memory { return in.mem }

func (in *Live) Close(ctx context.Context) error { return in.st.Close(ctx) }

package component

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/capsule-host/capsule-host/host/engine"
)

// How a component runs (RFC.md, components): its core modules are
// compiled once; each instance of the component is one engine.Store in
// which the component's definitions are evaluated in binary order. Core
// instances are instantiated in the order they are defined, with their
// arguments; an inline core instance is a bag of other items; an alias
// is a lookup; a component instantiation binds its imports to the given
// arguments and evaluates its definitions in its own index spaces.
//
// `canon lower` of an imported function is the host function the host
// already serves to core modules under the same interface and name
// (process.HostFuncs, wasip2): it was written for exactly that function's
// flattened Canonical ABI signature. Its Caller is the canon's options
// (memory, realloc), not the calling instance. `canon lift` of a core
// export keeps the core export: the host's tool calls already lift and
// lower the Canonical ABI over core exports, so a component's exports
// are presented to it under the names a core capsule uses
// ("iface#func", "cabi_post_iface#func", "cabi_realloc", memory).
//
// The same evaluation runs once with no Store at load (check mode): it
// compares every core import's type with what satisfies it, so a
// mismatch is a load error naming the interface, the function and both
// types, before anything is instantiated.

// ErrMismatch: a component's import or core link does not have the type
// of what the host serves or of what satisfies it.
var ErrMismatch = errors.New("component type mismatch")

// ErrResource: a resource handle that is not live (dropped twice, never
// made, or forged); a trap of the call that used it.
var ErrResource = errors.New("invalid resource handle")

// coreItem is a core func, table, memory or global.
type coreItem struct {
	kind engine.ExternKind
	ext  engine.Extern // nil in check mode
	// Func types, when known (always in check mode).
	params, results []engine.ValueType
	typed           bool
	// what names the item for errors ("capsule:process/host@1.1.0 spawn").
	what string
	// from is the core module exporting it, if it is a module's export,
	// and export the name it exports it by.
	from   *coreModule
	export string
}

// coreInst is a core instance: instantiated or a bag of exports.
type coreInst interface {
	export(name string) (coreItem, bool)
}

type bagInst map[string]coreItem

func (b bagInst) export(name string) (coreItem, bool) { it, ok := b[name]; return it, ok }

// realInst is an instantiated core module (si nil in check mode).
type realInst struct {
	si   engine.StoreInstance
	mod  *coreModule
	what string
}

func (r *realInst) export(name string) (coreItem, bool) {
	k, ok := r.mod.exportKinds[name]
	if !ok {
		return coreItem{}, false
	}
	it := coreItem{kind: k, what: fmt.Sprintf("%s export %q", r.what, name), from: r.mod, export: name}
	if k == engine.ExternFunc {
		d := r.mod.exportFuncs[name]
		it.params, it.results, it.typed = d.Params, d.Results, true
	}
	if r.si != nil {
		x, ok := r.si.Export(name)
		if !ok {
			return coreItem{}, false
		}
		it.ext = x
	}
	return it, true
}

// coreModule is a compiled embedded core module.
type coreModule struct {
	mod         engine.Module
	imports     []engine.ExternDef
	importFuncs map[[2]string]engine.FuncDef
	exportKinds map[string]engine.ExternKind
	exportFuncs map[string]engine.FuncDef
	goRuntime   bool // built by Go (gc): its producers section says so
}

// Component-level values.
type (
	// hostInst is an imported instance, served by the host as module.
	hostInst struct{ module, name string }
	// hostFuncRef is a function of an imported instance.
	hostFuncRef struct{ module, iface, name string }
	// liftRef is a lifted core function.
	liftRef struct {
		core             coreItem
		memory, realloc  coreItem
		postReturn       coreItem
		hasMem, hasAlloc bool
		hasPost          bool
		offset           int
	}
	// compInst is an instance of a nested component, or inline exports.
	compInst map[string]any
	// hostResource is a resource type exported by an imported instance.
	hostResource struct{ module, name string }
	// ownResource is a resource type the component defines.
	ownResource struct {
		env  *env
		idx  uint32
		dtor int
	}
	// compRef is a nested component with the env it closes over.
	compRef struct {
		c      *Component
		parent *env
	}
)

// env is one component being instantiated: its index spaces' values.
type env struct {
	c      *Component
	parent *env
	// args binds a nested component's imports by name; nil at the top
	// level, whose imports are the host's.
	args map[string]any
	vals [numSorts]map[uint32]any
	ln   *linker
}

func newEnv(c *Component, parent *env, args map[string]any, ln *linker) *env {
	e := &env{c: c, parent: parent, args: args, ln: ln}
	for i := range e.vals {
		e.vals[i] = map[uint32]any{}
	}
	return e
}

// run instantiates, in binary order, every core instance and component
// instance the component defines.
func (e *env) run() error {
	type step struct {
		off  int
		sort Sort
		idx  uint32
	}
	var steps []step
	for i, d := range e.c.Defs[SortCoreInstance] {
		steps = append(steps, step{e.c.CoreInstances[d.Index].Offset, SortCoreInstance, uint32(i)})
	}
	for i, d := range e.c.Defs[SortInstance] {
		if d.Kind == DefInstance {
			steps = append(steps, step{e.c.Instances[d.Index].Offset, SortInstance, uint32(i)})
		}
	}
	slices.SortFunc(steps, func(a, b step) int { return a.off - b.off })
	for _, s := range steps {
		if _, err := e.value(s.sort, s.idx); err != nil {
			return err
		}
	}
	return nil
}

// value is the item at idx in sort's index space, evaluated once.
func (e *env) value(s Sort, idx uint32) (any, error) {
	if v, ok := e.vals[s][idx]; ok {
		return v, nil
	}
	defs := e.c.Defs[s]
	if int(idx) >= len(defs) {
		return nil, e.fail(s, idx, "index out of range")
	}
	v, err := e.define(s, idx, defs[idx])
	if err != nil {
		return nil, err
	}
	e.vals[s][idx] = v
	return v, nil
}

func (e *env) fail(s Sort, idx uint32, format string, args ...any) *Error {
	return &Error{Section: s.String(), Offset: e.c.Offset, Reason: fmt.Sprintf("%s %d: ", s, idx) + fmt.Sprintf(format, args...), kind: ErrMalformed}
}

func (e *env) define(s Sort, idx uint32, d Def) (any, error) {
	switch d.Kind {
	case DefCoreModule:
		return e.ln.modules[e.c][d.Index], nil
	case DefComponent:
		return &compRef{c: e.c.Components[d.Index], parent: e}, nil
	case DefCoreInstance:
		return e.coreInstance(&e.c.CoreInstances[d.Index])
	case DefInstance:
		return e.instance(&e.c.Instances[d.Index])
	case DefAlias:
		return e.alias(&e.c.Aliases[d.Index])
	case DefCanon:
		return e.canon(&e.c.Canons[d.Index])
	case DefImport:
		return e.importValue(&e.c.Imports[d.Index])
	case DefExport:
		ex := &e.c.Exports[d.Index]
		return e.value(ex.Sort, ex.Index)
	case DefType:
		return nil, nil
	case DefResource:
		return &ownResource{env: e, idx: idx, dtor: d.Index}, nil
	}
	return nil, e.fail(s, idx, "unknown definition kind %d", d.Kind)
}

func (e *env) coreItemOf(s Sort, idx uint32) (coreItem, error) {
	v, err := e.value(s, idx)
	if err != nil {
		return coreItem{}, err
	}
	it, ok := v.(coreItem)
	if !ok {
		return coreItem{}, e.fail(s, idx, "not a core item (%T)", v)
	}
	return it, nil
}

func (e *env) coreInstance(ci *CoreInstance) (any, error) {
	if ci.Module < 0 {
		bag := bagInst{}
		for _, r := range ci.Exports {
			it, err := e.coreItemOf(r.Sort, r.Index)
			if err != nil {
				return nil, err
			}
			bag[r.Name] = it
		}
		return bag, nil
	}
	mv, err := e.value(SortCoreModule, uint32(ci.Module))
	if err != nil {
		return nil, err
	}
	m, ok := mv.(*coreModule)
	if !ok {
		return nil, unsupported("core instance", ci.Offset, "instantiating an imported core module", "embed the core module")
	}
	args := map[string]coreInst{}
	for _, a := range ci.Args {
		v, err := e.value(SortCoreInstance, a.Index)
		if err != nil {
			return nil, err
		}
		args[a.Name] = v.(coreInst)
	}
	return e.ln.instantiate(m, args, ci.Offset)
}

func (e *env) instance(in *Instance) (any, error) {
	if in.Component < 0 {
		ci := compInst{}
		for _, r := range in.Exports {
			v, err := e.value(r.Sort, r.Index)
			if err != nil {
				return nil, err
			}
			ci[r.Name] = v
		}
		return ci, nil
	}
	cv, err := e.value(SortComponent, uint32(in.Component))
	if err != nil {
		return nil, err
	}
	cr, ok := cv.(*compRef)
	if !ok {
		return nil, unsupported("instance", in.Offset, "instantiating an imported component", "embed the component")
	}
	args := map[string]any{}
	for _, a := range in.Args {
		v, err := e.value(a.Sort, a.Index)
		if err != nil {
			return nil, err
		}
		args[a.Name] = v
	}
	inner := newEnv(cr.c, cr.parent, args, e.ln)
	if err := inner.run(); err != nil {
		return nil, err
	}
	out := compInst{}
	for i := range cr.c.Exports {
		ex := &cr.c.Exports[i]
		v, err := inner.value(ex.Sort, ex.Index)
		if err != nil {
			return nil, err
		}
		out[ex.Name] = v
	}
	return out, nil
}

func (e *env) importValue(im *Extern) (any, error) {
	if e.args != nil {
		v, ok := e.args[im.Name]
		if !ok && im.Sort != SortType {
			return nil, &Error{Section: "import", Offset: im.Offset, Reason: fmt.Sprintf("nested component import %q is not given", im.Name), kind: ErrMalformed}
		}
		return v, nil
	}
	switch im.Sort {
	case SortInstance:
		mod, err := e.ln.served.resolve(im.Name, im.Offset)
		if err != nil {
			return nil, err
		}
		return &hostInst{module: mod, name: im.Name}, nil
	case SortType:
		return nil, nil
	}
	return nil, unsupported("import", im.Offset, fmt.Sprintf("import %q of a %s", im.Name, im.Sort), "import interfaces (instances) only")
}

func (e *env) alias(a *Alias) (any, error) {
	switch a.Kind {
	case AliasCoreExport:
		v, err := e.value(SortCoreInstance, a.Instance)
		if err != nil {
			return nil, err
		}
		it, ok := v.(coreInst).export(a.Name)
		if !ok {
			return nil, &Error{Section: "alias", Offset: a.Offset, Reason: fmt.Sprintf("core instance %d has no export %q", a.Instance, a.Name), kind: ErrMalformed}
		}
		if want := coreSortKind(a.Sort); it.kind != want {
			return nil, &Error{Section: "alias", Offset: a.Offset, Reason: fmt.Sprintf("core export %q is a %s, aliased as a %s", a.Name, it.kind, a.Sort), kind: ErrMismatch}
		}
		return it, nil
	case AliasExport:
		v, err := e.value(SortInstance, a.Instance)
		if err != nil {
			return nil, err
		}
		return e.instanceExport(v, a)
	}
	t := e
	for i := uint32(0); i < a.Count && t != nil; i++ {
		t = t.parent
	}
	if t == nil {
		return nil, &Error{Section: "alias", Offset: a.Offset, Reason: "outer alias past the outermost component", kind: ErrMalformed}
	}
	return t.value(a.Sort, a.Index)
}

func (e *env) instanceExport(v any, a *Alias) (any, error) {
	switch in := v.(type) {
	case *hostInst:
		switch a.Sort {
		case SortFunc:
			return &hostFuncRef{module: in.module, iface: in.name, name: a.Name}, nil
		case SortType:
			return &hostResource{module: in.module, name: a.Name}, nil
		}
		return nil, unsupported("alias", a.Offset, fmt.Sprintf("a %s export of imported instance %q", a.Sort, in.name), "import functions and types only")
	case compInst:
		x, ok := in[a.Name]
		if !ok && a.Sort != SortType {
			return nil, &Error{Section: "alias", Offset: a.Offset, Reason: fmt.Sprintf("instance has no export %q", a.Name), kind: ErrMalformed}
		}
		return x, nil
	}
	return nil, &Error{Section: "alias", Offset: a.Offset, Reason: fmt.Sprintf("export %q of a %T", a.Name, v), kind: ErrMalformed}
}

func coreSortKind(s Sort) engine.ExternKind {
	switch s {
	case SortCoreTable:
		return engine.ExternTable
	case SortCoreMemory:
		return engine.ExternMemory
	case SortCoreGlobal:
		return engine.ExternGlobal
	}
	return engine.ExternFunc
}

// canon evaluates a canon definition.
func (e *env) canon(cn *Canon) (any, error) {
	switch cn.Kind {
	case CanonLift:
		return e.lift(cn)
	case CanonLower:
		fv, err := e.value(SortFunc, cn.Func)
		if err != nil {
			return nil, err
		}
		hf, ok := fv.(*hostFuncRef)
		if !ok {
			return nil, unsupported("canon", cn.Offset, "canon lower of a function that is not a host import (component-to-component adapter)", "compose components before loading them")
		}
		return e.ln.lower(e, cn, hf)
	}
	tv, err := e.value(SortType, cn.Type)
	if err != nil {
		return nil, err
	}
	return e.ln.resourceFunc(cn, tv)
}

func (e *env) lift(cn *Canon) (any, error) {
	core, err := e.coreItemOf(SortCoreFunc, cn.Func)
	if err != nil {
		return nil, err
	}
	l := &liftRef{core: core, offset: cn.Offset}
	if cn.Memory >= 0 {
		if l.memory, err = e.coreItemOf(SortCoreMemory, uint32(cn.Memory)); err != nil {
			return nil, err
		}
		l.hasMem = true
	}
	if cn.Realloc >= 0 {
		if l.realloc, err = e.coreItemOf(SortCoreFunc, uint32(cn.Realloc)); err != nil {
			return nil, err
		}
		l.hasAlloc = true
	}
	if cn.PostReturn >= 0 {
		if l.postReturn, err = e.coreItemOf(SortCoreFunc, uint32(cn.PostReturn)); err != nil {
			return nil, err
		}
		l.hasPost = true
	}
	return l, nil
}

func sig(params, results []engine.ValueType) string {
	ps := make([]string, len(params))
	for i, p := range params {
		ps[i] = p.String()
	}
	rs := make([]string, len(results))
	for i, r := range results {
		rs[i] = r.String()
	}
	return "(" + strings.Join(ps, " ") + ") -> (" + strings.Join(rs, " ") + ")"
}

func sameTypes(a, b []engine.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package component

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/capsule-host/capsule-host/host/engine"
)

// linker holds what one evaluation of a component shares: the Store (nil
// in check mode), the compiled core modules, the host functions and the
// component's own resource tables.
type linker struct {
	ctx     context.Context
	store   engine.Store
	modules map[*Component][]*coreModule
	served  *servedSet
	funcs   map[[2]string]engine.HostFunc
	res     map[*ownResource]*handles
	// lowered are the host imports the component lowers, for Imports().
	lowered []engine.FuncDef
	// wit, in check mode only, is the host's WIT per served module, and
	// wants the core imports naming one of those modules, for
	// checkVersions.
	wit   WIT
	wants []coreWant
}

// coreWant is a core module's import of a function of a served module.
type coreWant struct {
	module, name string
	off          int
}

// instantiate instantiates m with args after checking every import
// against what satisfies it (kind and core type).
func (ln *linker) instantiate(m *coreModule, args map[string]coreInst, off int) (*realInst, error) {
	if err := refuseGoAdapter(m, args, off); err != nil {
		return nil, err
	}
	imports := engine.Imports{}
	for _, d := range m.imports {
		inst, ok := args[d.Module]
		if !ok {
			return nil, &Error{Section: "core instance", Offset: off, Reason: fmt.Sprintf("core module imports from %q, which is not an argument", d.Module), kind: ErrMalformed}
		}
		it, ok := inst.export(d.Name)
		if !ok {
			return nil, &Error{Section: "core instance", Offset: off, Reason: fmt.Sprintf("core module imports %q %q, which argument %q does not export", d.Module, d.Name, d.Module), kind: ErrMalformed}
		}
		if it.kind != d.Kind {
			return nil, &Error{Section: "core instance", Offset: off, Reason: fmt.Sprintf("core module imports %q %q as a %s; %s is a %s", d.Module, d.Name, d.Kind, it.what, it.kind), kind: ErrMismatch}
		}
		if want, ok := m.importFuncs[[2]string{d.Module, d.Name}]; ok && it.typed && (!sameTypes(want.Params, it.params) || !sameTypes(want.Results, it.results)) {
			return nil, &Error{Section: "core instance", Offset: off,
				Reason: fmt.Sprintf("core module imports %q %q as %s; %s is %s", d.Module, d.Name, sig(want.Params, want.Results), it.what, sig(it.params, it.results)), kind: ErrMismatch}
		}
		if _, ok := ln.wit[d.Module]; ok {
			ln.wants = append(ln.wants, coreWant{d.Module, d.Name, off})
		}
		if imports[d.Module] == nil {
			imports[d.Module] = map[string]engine.Extern{}
		}
		imports[d.Module][d.Name] = it.ext
	}
	ri := &realInst{mod: m, what: fmt.Sprintf("core instance at offset %#x", off)}
	if ln.store == nil {
		return ri, nil
	}
	si, err := ln.store.Instantiate(ln.ctx, m.mod, imports)
	if err != nil {
		return nil, err
	}
	ri.si = si
	return ri, nil
}

// checkVersions, after a check-mode evaluation, refuses a core import of
// a function of one version of an interface that the component does not
// lower, when it lowers the same function of another version, of a
// different type. wit-component does that when it merges imports of
// semver-compatible versions into the newest: a core module built against
// capsule:process/host@1.0.0 and 1.1.0, wrapped for a world importing
// 1.1.0, gets its 1.0.0 calls lowered with 1.1.0's layouts, which
// corrupts memory instead of failing (the function reaches it through
// wit-component's indirection table, so only the names tell). Functions
// whose types agree across the versions link as before.
//
// Linear in the imports and lowerings (a hostile binary may have many of
// both): the lowered functions are indexed by (interface without version,
// function).
func (ln *linker) checkVersions() error {
	lowered := map[[2]string]bool{}
	versions := map[[2]string][]string{} // (base, function) → modules lowering it
	for _, f := range ln.lowered {
		if lowered[[2]string{f.Module, f.Name}] {
			continue
		}
		lowered[[2]string{f.Module, f.Name}] = true
		if b, _, ok := splitVersion(f.Module); ok {
			versions[[2]string{b, f.Name}] = append(versions[[2]string{b, f.Name}], f.Module)
		}
	}
	for _, w := range ln.wants {
		if lowered[[2]string{w.module, w.name}] {
			continue
		}
		base, _, _ := splitVersion(w.module)
		for _, mod := range versions[[2]string{base, w.name}] {
			want, got := witFunc(ln.wit[w.module], w.name), witFunc(ln.wit[mod], w.name)
			if want == nil || got == nil {
				continue
			}
			if df := diffFunc(want, funcTypeOf(got)); df != nil {
				return &VersionMismatch{Module: w.module, Lowered: mod, Func: w.name, Offset: w.off, Path: df.path, Want: df.host, Got: df.comp}
			}
		}
	}
	return nil
}

// lower makes the host function behind an imported function a core func
// whose Caller is the canon's memory and realloc.
func (ln *linker) lower(e *env, cn *Canon, hf *hostFuncRef) (any, error) {
	f, ok := ln.funcs[[2]string{hf.module, hf.name}]
	if !ok {
		return nil, &Error{Section: "canon", Offset: cn.Offset, Construct: fmt.Sprintf("canon lower of %s function %q", hf.iface, hf.name),
			Reason: "the host serves no such function in " + hf.module, Hint: hintWIT, kind: ErrUnsupported}
	}
	it := coreItem{kind: engine.ExternFunc, params: f.Params, results: f.Results, typed: true,
		what: fmt.Sprintf("host function %s %q (served as %s)", hf.iface, hf.name, hf.module)}
	if !strings.HasPrefix(hf.module, "wasi:") {
		ln.lowered = append(ln.lowered, engine.FuncDef{Module: hf.module, Name: hf.name, Params: f.Params, Results: f.Results})
	}
	if ln.store == nil {
		return it, nil
	}
	oc := &optsCaller{st: ln.store}
	if cn.Memory >= 0 {
		m, err := e.coreItemOf(SortCoreMemory, uint32(cn.Memory))
		if err != nil {
			return nil, err
		}
		oc.mem = m.ext
	}
	if cn.Realloc >= 0 {
		r, err := e.coreItemOf(SortCoreFunc, uint32(cn.Realloc))
		if err != nil {
			return nil, err
		}
		oc.realloc = r.ext
	}
	fn := f.Fn
	xs, err := ln.store.Funcs(ln.ctx, []engine.HostFunc{{Module: f.Module, Name: f.Name, Params: f.Params, Results: f.Results,
		Fn: func(ctx context.Context, _ engine.Caller, stack []uint64) { fn(ctx, oc, stack) }}})
	if err != nil {
		return nil, err
	}
	it.ext = xs[0]
	return it, nil
}

// optsCaller is a lowered function's view of the guest: the canon's
// memory and realloc options.
type optsCaller struct {
	st           engine.Store
	mem, realloc engine.Extern
}

func (c *optsCaller) Memory() engine.Memory {
	if c.mem != nil {
		if m, ok := c.st.Memory(c.mem); ok {
			return m
		}
	}
	return noMemory{}
}

func (c *optsCaller) Realloc(ctx context.Context, oldPtr, oldSize, align, newSize uint32) (uint32, error) {
	if c.realloc == nil {
		return 0, &engine.Trap{Reason: "canon lower has no realloc option, but the function returns a list or string"}
	}
	r, err := c.st.Call(ctx, c.realloc, uint64(oldPtr), uint64(oldSize), uint64(align), uint64(newSize))
	if err != nil {
		return 0, err
	}
	if len(r) != 1 {
		return 0, &engine.Trap{Reason: "realloc returned no pointer"}
	}
	return uint32(r[0]), nil
}

// noMemory is the memory of a canon without a memory option: every
// access is out of range, which the Canonical ABI code traps on.
type noMemory struct{}

func (noMemory) Read(off, n uint32) ([]byte, bool) { return nil, n == 0 }
func (noMemory) Write(off uint32, b []byte) bool   { return len(b) == 0 }
func (noMemory) Size() uint32                      { return 0 }

// handles is one resource type's table: handle → representation.
type handles struct {
	next uint32
	live map[uint32]uint32
}

// resourceFunc evaluates canon resource.new/drop/rep.
func (ln *linker) resourceFunc(cn *Canon, tv any) (any, error) {
	switch t := tv.(type) {
	case *hostResource:
		if cn.Kind != CanonResourceDrop {
			return nil, &Error{Section: "canon", Offset: cn.Offset, Reason: fmt.Sprintf("%s of imported resource %q (only its owner may)", cn.Kind, t.name), kind: ErrMalformed}
		}
		return ln.lower(nil, &Canon{Offset: cn.Offset, Memory: -1, Realloc: -1}, &hostFuncRef{module: t.module, iface: t.module, name: "[resource-drop]" + t.name})
	case *ownResource:
		return ln.ownResourceFunc(cn, t)
	}
	return nil, &Error{Section: "canon", Offset: cn.Offset, Reason: fmt.Sprintf("%s of type %d, which is not a resource", cn.Kind, cn.Type), kind: ErrMismatch}
}

// ownResourceFunc implements resource.new/rep/drop of a resource type
// the component defines. A handle that is not live (dropped twice,
// never made, forged) traps that call with ErrResource's words.
func (ln *linker) ownResourceFunc(cn *Canon, t *ownResource) (any, error) {
	i32 := []engine.ValueType{engine.I32}
	it := coreItem{kind: engine.ExternFunc, params: i32, results: i32, typed: true, what: fmt.Sprintf("canon %s", cn.Kind)}
	if cn.Kind == CanonResourceDrop {
		it.results = nil
	}
	if ln.store == nil {
		return it, nil
	}
	h := ln.res[t]
	if h == nil {
		h = &handles{live: map[uint32]uint32{}}
		ln.res[t] = h
	}
	var fn func(ctx context.Context, c engine.Caller, s []uint64)
	switch cn.Kind {
	case CanonResourceNew:
		fn = func(_ context.Context, _ engine.Caller, s []uint64) {
			h.next++
			h.live[h.next] = uint32(s[0])
			s[0] = uint64(h.next)
		}
	case CanonResourceRep:
		fn = func(_ context.Context, _ engine.Caller, s []uint64) {
			rep, ok := h.live[uint32(s[0])]
			if !ok {
				engine.Trapf("%v: resource.rep of handle %d", ErrResource, uint32(s[0]))
			}
			s[0] = uint64(rep)
		}
	default:
		fn = ln.dropFunc(t, h)
	}
	xs, err := ln.store.Funcs(ln.ctx, []engine.HostFunc{{Module: "component", Name: cn.Kind.String(), Params: it.params, Results: it.results, Fn: fn}})
	if err != nil {
		return nil, err
	}
	it.ext = xs[0]
	return it, nil
}

// dropFunc removes a handle, then runs the type's destructor on its rep.
func (ln *linker) dropFunc(t *ownResource, h *handles) func(context.Context, engine.Caller, []uint64) {
	return func(ctx context.Context, _ engine.Caller, s []uint64) {
		rep, ok := h.live[uint32(s[0])]
		if !ok {
			engine.Trapf("%v: resource.drop of handle %d", ErrResource, uint32(s[0]))
		}
		delete(h.live, uint32(s[0]))
		if t.dtor < 0 {
			return
		}
		d, err := t.env.coreItemOf(SortCoreFunc, uint32(t.dtor))
		if err == nil {
			_, err = ln.store.Call(ctx, d.ext, uint64(rep))
		}
		if err != nil {
			engine.Trapf("resource destructor: %v", err)
		}
	}
}

// servedSet resolves an imported interface name to the module name the
// host serves it under: the same name, or a semver-compatible version
// (0.2.x for any 0.2.y, as wasmtime does; 1.x.y for 1.a.b with x.y ≥ a.b).
type servedSet struct{ modules map[string]bool }

func newServedSet(funcs []engine.HostFunc) *servedSet {
	s := &servedSet{modules: map[string]bool{}}
	for _, f := range funcs {
		s.modules[f.Module] = true
	}
	return s
}

func splitVersion(name string) (base string, ver [3]int, ok bool) {
	base, v, found := strings.Cut(name, "@")
	if !found {
		return name, ver, false
	}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) != 3 {
		return base, ver, false
	}
	for i, p := range parts {
		// Strict semver: digits only (Atoi takes "+1"), no leading zero.
		n, err := strconv.Atoi(p)
		if err != nil || strings.Trim(p, "0123456789") != "" || len(p) > 1 && p[0] == '0' {
			return base, ver, false
		}
		ver[i] = n
	}
	return base, ver, true
}

func (s *servedSet) resolve(name string, off int) (string, error) {
	if s.modules[name] {
		return name, nil
	}
	base, want, ok := splitVersion(name)
	best, bestVer, found := "", [3]int{}, false
	var same []string
	for m := range s.modules {
		b, v, vok := splitVersion(m)
		if b != base || !vok {
			continue
		}
		same = append(same, m)
		if !ok || !compatible(want, v) {
			continue
		}
		if !found || later(v, bestVer) {
			best, bestVer, found = m, v, true
		}
	}
	if found {
		return best, nil
	}
	reason := "the host does not serve this interface to components"
	if len(same) > 0 {
		slices.Sort(same)
		reason = "no semver-compatible version is served (this host serves " + strings.Join(same, ", ") + ")"
		if strings.HasPrefix(name, "wasi:") && ok && want[0] == 0 && want[1] >= 3 {
			reason += "; WASI 0.3 (async) is not supported"
		}
	}
	return "", &Error{Section: "import", Offset: off, Construct: fmt.Sprintf("import %q", name), Reason: reason,
		Hint: hintWIT, kind: ErrUnsupported}
}

// compatible: served version v can stand in for wanted w.
func compatible(w, v [3]int) bool {
	if w[0] != v[0] {
		return false
	}
	if w[0] == 0 {
		return w[1] == v[1]
	}
	return v[1] > w[1] || v[1] == w[1] && v[2] >= w[2]
}

func later(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return false
}

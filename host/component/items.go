package component

// coreSort reads a core:sort byte.
func coreSort(r *reader) Sort {
	switch c := r.byte(); c {
	case 0x00:
		return SortCoreFunc
	case 0x01:
		return SortCoreTable
	case 0x02:
		return SortCoreMemory
	case 0x03:
		return SortCoreGlobal
	case 0x10:
		return SortCoreType
	case 0x11:
		return SortCoreModule
	case 0x12:
		return SortCoreInstance
	case 0x04:
		r.refuse("core tag (exception handling)", "build the guest without exceptions")
	default:
		r.fail("unknown core sort %#x", c)
	}
	return SortCoreFunc
}

// sort reads a component sort: 0x00 then a core sort, or a component sort.
func sort(r *reader) Sort {
	switch c := r.byte(); c {
	case 0x00:
		return coreSort(r)
	case 0x01:
		return SortFunc
	case 0x02:
		return SortValue
	case 0x03:
		return SortType
	case 0x04:
		return SortComponent
	case 0x05:
		return SortInstance
	default:
		r.fail("unknown sort %#x", c)
	}
	return SortFunc
}

// externName reads an importname'/exportname': a 0x00 or 0x01 prefix,
// then the name.
func externName(r *reader) string {
	if c := r.byte(); c != 0x00 && c != 0x01 {
		r.fail("unknown extern name prefix %#x", c)
		return ""
	}
	return r.name()
}

func (s *scope) coreInstance(r *reader) {
	ci := CoreInstance{Offset: r.off(), Module: -1}
	switch c := r.byte(); c {
	case 0x00:
		m := r.u32()
		s.check(r, SortCoreModule, m)
		ci.Module = int64(m)
		n := r.count(3)
		for i := 0; i < n && r.err == nil; i++ {
			name := r.name()
			if k := r.byte(); k != 0x12 && r.err == nil {
				r.fail("core instantiate argument %q: kind %#x, want 0x12 (instance)", name, k)
			}
			idx := r.u32()
			s.check(r, SortCoreInstance, idx)
			ci.Args = append(ci.Args, Ref{Name: name, Sort: SortCoreInstance, Index: idx})
		}
	case 0x01:
		n := r.count(3)
		for i := 0; i < n && r.err == nil; i++ {
			name := r.name()
			so := coreSort(r)
			idx := r.u32()
			s.check(r, so, idx)
			ci.Exports = append(ci.Exports, Ref{Name: name, Sort: so, Index: idx})
		}
	default:
		r.fail("unknown core instance kind %#x", c)
	}
	if r.err == nil {
		s.c.CoreInstances = append(s.c.CoreInstances, ci)
		s.def(SortCoreInstance, DefCoreInstance, len(s.c.CoreInstances)-1)
	}
}

func (s *scope) instance(r *reader) {
	in := Instance{Offset: r.off(), Component: -1}
	switch c := r.byte(); c {
	case 0x00:
		comp := r.u32()
		s.check(r, SortComponent, comp)
		in.Component = int64(comp)
		n := r.count(3)
		for i := 0; i < n && r.err == nil; i++ {
			name := r.name()
			so := sort(r)
			idx := r.u32()
			s.check(r, so, idx)
			in.Args = append(in.Args, Ref{Name: name, Sort: so, Index: idx})
		}
	case 0x01:
		n := r.count(3)
		for i := 0; i < n && r.err == nil; i++ {
			name := externName(r)
			so := sort(r)
			idx := r.u32()
			s.check(r, so, idx)
			in.Exports = append(in.Exports, Ref{Name: name, Sort: so, Index: idx})
		}
	default:
		r.fail("unknown instance kind %#x", c)
	}
	if r.err == nil {
		s.c.Instances = append(s.c.Instances, in)
		s.def(SortInstance, DefInstance, len(s.c.Instances)-1)
	}
}

func (s *scope) alias(r *reader) {
	a := Alias{Offset: r.off(), Sort: sort(r)}
	switch k := r.byte(); k {
	case 0x00:
		a.Kind, a.Instance = AliasExport, r.u32()
		s.check(r, SortInstance, a.Instance)
		a.Name = r.name()
	case 0x01:
		a.Kind, a.Instance = AliasCoreExport, r.u32()
		s.check(r, SortCoreInstance, a.Instance)
		a.Name = r.name()
	case 0x02:
		a.Kind, a.Count, a.Index = AliasOuter, r.u32(), r.u32()
		s.checkOuter(r, a)
	default:
		r.fail("unknown alias target %#x", k)
	}
	if r.err == nil {
		s.c.Aliases = append(s.c.Aliases, a)
		s.def(a.Sort, DefAlias, len(s.c.Aliases)-1)
		s.setLast(a.Sort, s.aliasType(a))
	}
}

// aliasType is the type an alias of a type or instance stands for: the
// enclosing scope's entry (outer) or the instance type's export.
func (s *scope) aliasType(a Alias) *Type {
	if a.Sort != SortType && a.Sort != SortInstance {
		return nil
	}
	if a.Kind == AliasOuter {
		t := s
		for i := uint32(0); i < a.Count && t != nil; i++ {
			t = t.parent
		}
		if t == nil || a.Sort != SortType {
			return nil
		}
		return t.typeAt(a.Index)
	}
	if a.Kind != AliasExport || int64(a.Instance) >= int64(len(s.insts)) {
		return nil
	}
	if ex := s.insts[a.Instance].Export(a.Name); ex != nil && ex.Sort == a.Sort {
		return ex.Type
	}
	return nil
}

// checkOuter resolves an outer alias against the enclosing component
// Count levels up. Only types, core types, core modules and components
// may be aliased from outside (the MVP's rule, which keeps instances
// acyclic).
func (s *scope) checkOuter(r *reader, a Alias) {
	switch a.Sort {
	case SortType, SortCoreType, SortCoreModule, SortComponent:
	default:
		r.fail("outer alias of a %s (only types, modules and components)", a.Sort)
		return
	}
	t := s
	for i := uint32(0); i < a.Count && t != nil; i++ {
		t = t.parent
	}
	if t == nil {
		r.fail("outer alias %d levels up from a component nested %d deep", a.Count, s.depth)
		return
	}
	t.check(r, a.Sort, a.Index)
}

func (s *scope) canon(r *reader) {
	cn := Canon{Offset: r.off(), Memory: -1, Realloc: -1, PostReturn: -1}
	switch c := r.byte(); c {
	case 0x00:
		if r.byte() != 0x00 {
			r.fail("canon lift: bad sub-opcode")
		}
		cn.Kind, cn.Func = CanonLift, r.u32()
		s.check(r, SortCoreFunc, cn.Func)
		s.canonOpts(r, &cn)
		cn.Type = r.u32()
		s.check(r, SortType, cn.Type)
		s.def(SortFunc, DefCanon, len(s.c.Canons))
	case 0x01:
		if r.byte() != 0x00 {
			r.fail("canon lower: bad sub-opcode")
		}
		cn.Kind, cn.Func = CanonLower, r.u32()
		s.check(r, SortFunc, cn.Func)
		s.canonOpts(r, &cn)
		s.def(SortCoreFunc, DefCanon, len(s.c.Canons))
	case 0x02, 0x03, 0x04:
		cn.Kind = map[byte]CanonKind{0x02: CanonResourceNew, 0x03: CanonResourceDrop, 0x04: CanonResourceRep}[c]
		cn.Type = r.u32()
		s.check(r, SortType, cn.Type)
		s.def(SortCoreFunc, DefCanon, len(s.c.Canons))
	default:
		r.refuse(canonBuiltin(c), "the host runs synchronous components without threads: build without async or shared-everything threads")
	}
	if r.err == nil {
		s.c.Canons = append(s.c.Canons, cn)
	}
}

// canonBuiltin names the canon built-ins past the MVP's five.
func canonBuiltin(c byte) string {
	names := map[byte]string{0x05: "canon thread.spawn_ref", 0x06: "canon thread.available_parallelism",
		0x07: "canon resource.drop async", 0x08: "canon backpressure.set", 0x09: "canon task.return",
		0x0a: "canon context.get", 0x0c: "canon yield", 0x0d: "canon subtask.drop", 0x0e: "canon stream.new",
		0x40: "canon thread.spawn_indirect"}
	if n, ok := names[c]; ok {
		return n
	}
	return "canon built-in " + hex(c) + " (async or threads)"
}

func hex(c byte) string {
	const d = "0123456789abcdef"
	return "0x" + string([]byte{d[c>>4], d[c&15]})
}

func (s *scope) canonOpts(r *reader, cn *Canon) {
	n := r.count(1)
	for i := 0; i < n && r.err == nil; i++ {
		switch o := r.byte(); o {
		case 0x00: // string-encoding=utf8
		case 0x01:
			r.refuse(cn.Kind.String()+" option string-encoding=utf16", "build the guest with UTF-8 strings (the default of wit-bindgen, jco and componentize-js)")
		case 0x02:
			r.refuse(cn.Kind.String()+" option string-encoding=latin1+utf16", "build the guest with UTF-8 strings")
		case 0x03:
			cn.Memory = int64(r.u32())
			s.check(r, SortCoreMemory, uint32(cn.Memory))
		case 0x04:
			cn.Realloc = int64(r.u32())
			s.check(r, SortCoreFunc, uint32(cn.Realloc))
		case 0x05:
			cn.PostReturn = int64(r.u32())
			s.check(r, SortCoreFunc, uint32(cn.PostReturn))
		case 0x06, 0x07:
			r.refuse(cn.Kind.String()+" option async", "build the guest without async exports and imports")
		default:
			r.fail("unknown canon option %#x", o)
		}
	}
}

func (s *scope) importDecl(r *reader) {
	e := Extern{Offset: r.off(), Name: externName(r)}
	var t *Type
	e.Sort, e.Type, t = s.externDesc(r)
	if r.err == nil {
		s.c.Imports = append(s.c.Imports, e)
		s.def(e.Sort, DefImport, len(s.c.Imports)-1)
		s.setLast(e.Sort, nameType(t, e.Name))
	}
}

func (s *scope) export(r *reader) {
	e := Export{Offset: r.off(), Name: externName(r)}
	e.Sort = sort(r)
	e.Index = r.u32()
	s.check(r, e.Sort, e.Index)
	switch r.byte() { // optional ascribed type
	case 0x00:
	case 0x01:
		s.externDesc(r)
	default:
		r.fail("export %q: bad optional type flag", e.Name)
	}
	if r.err == nil {
		s.c.Exports = append(s.c.Exports, e)
		s.def(e.Sort, DefExport, len(s.c.Exports)-1)
		switch e.Sort {
		case SortType:
			s.setLast(e.Sort, s.typeAt(e.Index))
		case SortInstance:
			s.setLast(e.Sort, s.insts[e.Index])
		}
	}
}

// externDesc reads an externdesc in this component's index spaces and
// returns the sort it adds to, the type index it names and the type it
// describes (a new resource for a `sub resource` bound; nil for a core
// module).
func (s *scope) externDesc(r *reader) (Sort, uint32, *Type) {
	switch c := r.byte(); c {
	case 0x00:
		if r.byte() != 0x11 {
			r.fail("core extern description other than module")
		}
		t := r.u32()
		s.check(r, SortCoreType, t)
		return SortCoreModule, t, nil
	case 0x01, 0x04, 0x05:
		t := r.u32()
		s.check(r, SortType, t)
		return map[byte]Sort{0x01: SortFunc, 0x04: SortComponent, 0x05: SortInstance}[c], t, s.typeAt(t)
	case 0x02:
		r.refuse("value import or export", "value imports are a gated feature; pass configuration as tool input")
		return SortValue, 0, nil
	case 0x03:
		switch b := r.byte(); b {
		case 0x00:
			t := r.u32()
			s.check(r, SortType, t)
			return SortType, t, s.typeAt(t)
		case 0x01:
			return SortType, 0, &Type{Kind: TResource}
		default:
			r.fail("unknown type bound %#x", b)
		}
		return SortType, 0, nil
	default:
		r.fail("unknown extern description %#x", c)
	}
	return SortFunc, 0, nil
}

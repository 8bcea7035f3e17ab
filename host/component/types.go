package component

// isPrimitive reports whether c is a primitive value type code
// (bool 0x7f down to string 0x73); error-context (0x64) is async-only.
func isPrimitive(c byte) bool { return c >= 0x73 && c <= 0x7f }

// valType reads a valtype: a primitive code or a type index.
func (s *scope) valType(r *reader) *Type {
	c := r.peek()
	switch {
	case r.err != nil:
	case isPrimitive(c):
		r.byte()
		return primTypes[c]
	case c == 0x64:
		r.refuse("error-context type", "error-context belongs to async; build without async")
	default:
		i := r.s33()
		if i < 0 && r.err == nil {
			r.fail("unknown value type code %d", i)
			return unknownType
		}
		s.check(r, SortType, uint32(i))
		return s.typeAt(uint32(i))
	}
	return unknownType
}

// typeAt is entry i of the type index space (unknownType if it is not
// decoded or out of range, which check has already reported).
func (s *scope) typeAt(i uint32) *Type {
	if int64(i) < int64(len(s.types)) {
		return s.types[i]
	}
	return unknownType
}

// optValType reads an optional valtype; nil when absent.
func (s *scope) optValType(r *reader) *Type {
	switch b := r.byte(); b {
	case 0x00:
	case 0x01:
		return s.valType(r)
	default:
		r.fail("bad optional value type flag %#x", b)
	}
	return nil
}

// named reads a vector of (label, valtype): record fields, parameters.
func (s *scope) named(r *reader) []NamedType {
	var out []NamedType
	s.vec(r, 2, func(r *reader) {
		n := r.name()
		out = append(out, NamedType{Name: n, Type: s.valType(r)})
	})
	return out
}

// typeDef reads one type-section entry (also a type declaration inside
// a component or instance type) and adds it to the type index space.
func (s *scope) typeDef(r *reader) {
	kind, dtor := DefType, -1
	var t *Type
	switch c := r.peek(); {
	case r.err != nil:
	case c == 0x40:
		r.byte()
		t = &Type{Kind: TFunc, Fields: s.named(r)}
		t.Ok, t.NamedResults = s.results(r)
	case c == 0x41 || c == 0x42:
		r.byte()
		t = s.declType(r, c == 0x41)
	case c == 0x3f:
		r.byte()
		kind, t = DefResource, &Type{Kind: TResource}
		if r.byte() != 0x7f {
			r.fail("resource representation other than i32")
		}
		switch b := r.byte(); b {
		case 0x00:
		case 0x01:
			f := r.u32()
			s.check(r, SortCoreFunc, f)
			dtor = int(f)
		default:
			r.fail("bad resource destructor flag %#x", b)
		}
	case c == 0x3e:
		r.refuse("resource type with an async destructor", "build without async")
	case c == 0x43:
		r.refuse("async func type", "build without async")
	default:
		t = s.defValType(r)
	}
	if r.err == nil {
		s.def(SortType, kind, dtor)
		s.setLast(SortType, t)
		s.c.Types++
	}
}

// results reads a function's result: one type, none, or (pre-0.2) a
// list of named results.
func (s *scope) results(r *reader) (*Type, []NamedType) {
	switch b := r.byte(); b {
	case 0x00:
		return s.valType(r), nil
	case 0x01: // none (0x01 0x00), or the pre-0.2 named results
		return nil, s.named(r)
	default:
		r.fail("bad result list %#x", b)
	}
	return nil, nil
}

// defValType reads a defined value type (record, variant, list, ...).
func (s *scope) defValType(r *reader) *Type {
	switch c := r.byte(); {
	case isPrimitive(c):
		return primTypes[c]
	case c == 0x72: // record
		return &Type{Kind: TRecord, Fields: s.named(r)}
	case c == 0x71: // variant
		t := &Type{Kind: TVariant}
		s.vec(r, 3, func(r *reader) {
			n := r.name()
			t.Fields = append(t.Fields, NamedType{Name: n, Type: s.optValType(r)})
			if r.byte() != 0x00 {
				r.fail("variant case refinement (removed from the MVP)")
			}
		})
		return t
	case c == 0x70, c == 0x6b: // list, option
		return &Type{Kind: map[byte]TypeKind{0x70: TList, 0x6b: TOption}[c], Elem: s.valType(r)}
	case c == 0x6f: // tuple
		t := &Type{Kind: TTuple}
		s.vec(r, 1, func(r *reader) { t.Items = append(t.Items, s.valType(r)) })
		return t
	case c == 0x6e, c == 0x6d: // flags, enum
		t := &Type{Kind: map[byte]TypeKind{0x6e: TFlags, 0x6d: TEnum}[c]}
		n := r.count(1)
		if c == 0x6e && n > 32 {
			r.fail("flags with %d labels (at most 32)", n)
		}
		for i := 0; i < n && r.err == nil; i++ {
			t.Labels = append(t.Labels, r.name())
		}
		return t
	case c == 0x6a: // result
		t := &Type{Kind: TResult}
		t.Ok = s.optValType(r)
		t.Err = s.optValType(r)
		return t
	case c == 0x69, c == 0x68: // own, borrow
		i := r.u32()
		s.check(r, SortType, i)
		return &Type{Kind: map[byte]TypeKind{0x69: TOwn, 0x68: TBorrow}[c], Elem: s.typeAt(i)}
	case c == 0x67:
		r.refuse("fixed-length list type", "fixed-length lists are a gated feature; use list<T>")
	case c == 0x66, c == 0x65, c == 0x64:
		r.refuse("stream, future or error-context type", "build without async")
	default:
		r.fail("unknown type code %#x", c)
	}
	return unknownType
}

// declType reads the declarations of a component type (component) or an
// instance type. They have their own index spaces, nested in this one.
// The type keeps the exports (an instance type's is what is checked
// against the host's WIT).
func (s *scope) declType(r *reader, component bool) *Type {
	t := &Type{Kind: TInstance}
	if component {
		t.Kind = TComponent
	}
	in := &scope{c: &Component{}, parent: s, depth: s.depth + 1}
	if in.depth > maxDepth {
		r.refuse("types nested deeper than 32", "flatten the type")
		return t
	}
	s.vec(r, 2, func(r *reader) {
		switch d := r.byte(); d {
		case 0x00:
			in.coreType(r)
		case 0x01:
			in.typeDef(r)
		case 0x02:
			in.alias(r)
		case 0x03:
			if !component {
				r.fail("import declaration in an instance type")
			}
			in.importDecl(r)
		case 0x04:
			name := externName(r)
			so, _, et := in.externDesc(r)
			et = nameType(et, name)
			in.add(so)
			in.setLast(so, et)
			if r.err == nil {
				t.Exports = append(t.Exports, TypeExport{Name: name, Sort: so, Type: et})
			}
		default:
			r.fail("unknown type declaration %#x", d)
		}
	})
	return t
}

// nameType gives a type the name it is exported or imported under, if
// it has none yet (a resource's identity; for messages otherwise).
func nameType(t *Type, name string) *Type {
	if t != nil && t.Name == "" && t != unknownType && t.Kind != TPrim {
		t.Name = name
	}
	return t
}

// coreType reads a core type: a func type or a module type.
func (s *scope) coreType(r *reader) {
	switch c := r.byte(); c {
	case 0x60:
		coreFuncType(r)
	case 0x50:
		s.moduleType(r)
	case 0x4e, 0x4f, 0x5e, 0x5f:
		r.refuse("core GC type", "build the guest without wasm GC")
	default:
		r.fail("unknown core type code %#x", c)
	}
	if r.err == nil {
		s.add(SortCoreType)
	}
}

func coreValType(r *reader) {
	switch c := r.byte(); c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
	default:
		r.fail("unknown core value type %#x", c)
	}
}

func coreFuncType(r *reader) {
	for range 2 {
		n := r.count(1)
		for i := 0; i < n && r.err == nil; i++ {
			coreValType(r)
		}
	}
}

// moduleType reads a core module type's declarations. Core types in it
// are counted locally; its imports and exports are decoded, not kept.
func (s *scope) moduleType(r *reader) {
	local := uint32(0)
	s.vec(r, 1, func(r *reader) {
		switch d := r.byte(); d {
		case 0x00:
			r.name()
			r.name()
			coreImportDesc(r, local)
		case 0x01:
			if r.byte() != 0x60 {
				r.refuse("module type declaring a non-func core type", "build the guest without wasm GC")
			}
			coreFuncType(r)
			local++
		case 0x02:
			if r.byte() != 0x10 || r.byte() != 0x01 {
				r.fail("module type alias other than an outer core type")
			}
			r.u32()
			r.u32()
			local++
		case 0x03:
			r.name()
			coreImportDesc(r, local)
		default:
			r.fail("unknown module type declaration %#x", d)
		}
	})
}

// coreImportDesc reads a core import/export description (func type,
// table, memory, global) in a module type with local core types.
func coreImportDesc(r *reader, local uint32) {
	limits := func() {
		switch f := r.byte(); f {
		case 0x00, 0x04:
			r.leb(64)
		case 0x01, 0x03, 0x05, 0x07:
			r.leb(64)
			r.leb(64)
		default:
			r.fail("unknown limits flag %#x", f)
		}
	}
	switch k := r.byte(); k {
	case 0x00:
		if t := r.u32(); t >= local && r.err == nil {
			r.fail("core type index %d out of range (%d defined)", t, local)
		}
	case 0x01:
		coreValType(r)
		limits()
	case 0x02:
		limits()
	case 0x03:
		coreValType(r)
		if m := r.byte(); m > 1 {
			r.fail("bad global mutability %#x", m)
		}
	default:
		r.fail("unknown core import kind %#x", k)
	}
}

package component

// Section ids of the component binary format (component-model
// design/mvp/Binary.md).
const (
	secCustom       = 0
	secCoreModule   = 1
	secCoreInstance = 2
	secCoreType     = 3
	secComponent    = 4
	secInstance     = 5
	secAlias        = 6
	secType         = 7
	secCanon        = 8
	secStart        = 9
	secImport       = 10
	secExport       = 11
	secValue        = 12
)

var sectionNames = map[byte]string{
	secCustom: "custom", secCoreModule: "core module", secCoreInstance: "core instance", secCoreType: "core type",
	secComponent: "component", secInstance: "instance", secAlias: "alias", secType: "type", secCanon: "canon",
	secStart: "start", secImport: "import", secExport: "export", secValue: "value",
}

// maxDepth bounds nested components (a hostile binary could nest deeply
// enough to exhaust the stack otherwise).
const maxDepth = 32

// Parse decodes and checks a component binary: every section, every
// vector count against the section's size, every index against its index
// space (outer aliases against the enclosing components). A core module
// is refused with ErrMalformed: use Detect first.
func Parse(b []byte) (*Component, error) {
	c, err := parse(b, 0, nil, 0)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// parse decodes the component in b, which starts at base in the
// outermost binary; parent is the enclosing component (for outer aliases).
func parse(b []byte, base int, parent *scope, depth int) (*Component, *Error) {
	k, err := Detect(b)
	if err != nil {
		e := err.(*Error)
		e.Offset += base
		return nil, e
	}
	if k != KindComponent {
		return nil, malformed("", base, "a %s, not a component", k)
	}
	if depth > maxDepth {
		return nil, unsupported("component", base, "components nested deeper than 32", "flatten the component")
	}
	c := &Component{Offset: base}
	sc := &scope{c: c, parent: parent, depth: depth}
	pos := 8
	for pos < len(b) {
		r := &reader{b: b[pos:], base: base + pos, section: "section header"}
		id := r.byte()
		size := r.u32()
		if r.err != nil {
			return nil, r.err
		}
		start := pos + r.pos
		if uint64(size) > uint64(len(b)-start) {
			return nil, malformed(sectionName(id), base+pos, "section size %d exceeds the %d bytes left", size, len(b)-start)
		}
		body := &reader{b: b[start : start+int(size)], base: base + start, section: sectionName(id)}
		if e := sc.section(id, body); e != nil {
			return nil, e
		}
		if body.pos != len(body.b) {
			return nil, malformed(body.section, body.off(), "%d trailing bytes in section", len(body.b)-body.pos)
		}
		pos = start + int(size)
	}
	c.TypeSpace, c.InstanceTypes = sc.types, sc.insts
	return c, nil
}

func sectionName(id byte) string {
	if n, ok := sectionNames[id]; ok {
		return n
	}
	return "unknown"
}

// scope is a component being decoded, with its enclosing components.
type scope struct {
	c      *Component
	parent *scope
	depth  int
	// types and insts parallel the type and instance index spaces: the
	// type of each entry (unknownType where it is not followed).
	types, insts []*Type
}

// section decodes one section's body into the component.
func (s *scope) section(id byte, r *reader) *Error {
	switch id {
	case secCustom:
		r.name()
		r.pos = len(r.b)
	case secCoreModule:
		k, err := Detect(r.b)
		if err != nil || k != KindCoreModule {
			r.fail("embedded core module has no core-module preamble")
			break
		}
		s.c.CoreModules = append(s.c.CoreModules, CoreModule{Offset: r.off(), Bytes: r.b})
		s.def(SortCoreModule, DefCoreModule, len(s.c.CoreModules)-1)
		r.pos = len(r.b)
	case secComponent:
		inner, e := parse(r.b, r.off(), s, s.depth+1)
		if e != nil {
			return e
		}
		s.c.Components = append(s.c.Components, inner)
		s.def(SortComponent, DefComponent, len(s.c.Components)-1)
		r.pos = len(r.b)
	case secCoreInstance:
		s.vec(r, 2, s.coreInstance)
	case secCoreType:
		s.vec(r, 1, s.coreType)
	case secInstance:
		s.vec(r, 2, s.instance)
	case secAlias:
		s.vec(r, 3, s.alias)
	case secType:
		s.vec(r, 1, s.typeDef)
	case secCanon:
		s.vec(r, 2, s.canon)
	case secImport:
		s.vec(r, 3, s.importDecl)
	case secExport:
		s.vec(r, 3, s.export)
	case secStart:
		r.refuse("start section (component-level start function)", "export the function and let the host call it")
	case secValue:
		r.refuse("value section", "value imports and definitions are a gated feature; pass configuration as tool input")
	default:
		r.fail("unknown section id %d", id)
	}
	return r.err
}

// vec decodes a vector of items of at least min bytes each.
func (s *scope) vec(r *reader, min int, item func(*reader)) {
	n := r.count(min)
	for i := 0; i < n && r.err == nil; i++ {
		item(r)
	}
}

func (s *scope) add(sort Sort) {
	s.c.Size[sort]++
	switch sort {
	case SortType:
		s.types = append(s.types, unknownType)
	case SortInstance:
		s.insts = append(s.insts, unknownType)
	}
}

// setLast records the type of the entry just added to sort's index
// space (types and instances only; nil leaves it unknown).
func (s *scope) setLast(sort Sort, t *Type) {
	if t == nil {
		return
	}
	switch sort {
	case SortType:
		s.types[len(s.types)-1] = t
	case SortInstance:
		s.insts[len(s.insts)-1] = t
	}
}

// def adds an item to sort's index space and records what defined it, so
// instantiation can follow an index to its definition.
func (s *scope) def(sort Sort, kind DefKind, index int) {
	s.add(sort)
	s.c.Defs[sort] = append(s.c.Defs[sort], Def{Kind: kind, Index: index})
}

// check refuses an index outside its index space as it is so far.
func (s *scope) check(r *reader, sort Sort, idx uint32) {
	if r.err == nil && idx >= s.c.Size[sort] {
		r.fail("%s index %d out of range (%d defined)", sort, idx, s.c.Size[sort])
	}
}

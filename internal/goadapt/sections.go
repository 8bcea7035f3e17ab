package goadapt

// reallocSig is the func type (i32 i32 i32 i32) -> i32 of cabi_realloc.
const reallocSig = "\x60\x04\x7f\x7f\x7f\x7f\x01\x7f"

func (m *module) readTypes(r *reader) {
	m.types = r.count(3)
	for i := 0; i < m.types && r.err == nil; i++ {
		start := r.pos
		if form := r.byte(); form != 0x60 {
			r.fail(ErrUnsupported, "type %d is not a func type (form %#x; GC types are not handled)", i, form)
			return
		}
		for j := 0; j < 2; j++ { // params, results
			n := r.count(1)
			for k := 0; k < n; k++ {
				r.valType()
			}
		}
		if r.err == nil && m.reallocType < 0 && string(r.b[start:r.pos]) == reallocSig {
			m.reallocType = i
		}
	}
}

// valType reads a one-byte value type; the typed-reference encodings
// (0x63, 0x64 with a heap type) are refused.
func (r *reader) valType() {
	switch t := r.byte(); t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
	default:
		if r.err == nil {
			r.fail(ErrUnsupported, "value type %#x", t)
		}
	}
}

func (m *module) readImports(r *reader) {
	n := r.count(4)
	for i := 0; i < n && r.err == nil; i++ {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0:
			r.u32()
			m.importFuncs++
		case 1:
			r.valType()
			r.limits()
		case 2:
			min := r.limits()
			if !m.hasMemory {
				m.memMin, m.hasMemory = min, true
			}
		case 3:
			r.valType()
			r.byte()
			m.importGlobs++
		case 4:
			r.byte()
			r.u32()
		default:
			r.fail(ErrMalformed, "import %d has kind %#x", i, kind)
		}
	}
}

// limits reads a table or memory type's limits and returns the minimum.
func (r *reader) limits() uint64 {
	flags := r.u32()
	if flags&^7 != 0 {
		r.fail(ErrUnsupported, "limits flags %#x", flags)
		return 0
	}
	min := r.uleb(64)
	if flags&1 != 0 {
		r.uleb(64)
	}
	return min
}

func (m *module) readExports(r *reader) {
	n := r.count(3)
	for i := 0; i < n && r.err == nil; i++ {
		name := r.name()
		if kind := r.byte(); kind > 4 {
			r.fail(ErrMalformed, "export %q has kind %#x", name, kind)
		}
		r.u32()
		m.exports[name] = true
	}
}

// constExpr reads a constant expression to its end opcode; it returns
// the value and true when the expression is exactly one i32.const.
func (r *reader) constExpr() (int64, bool) {
	var v int64
	var first byte
	for ops := 1; r.err == nil; ops++ {
		op := r.byte()
		if ops == 1 {
			first = op
		}
		switch op {
		case 0x0b:
			return v, ops == 2 && first == 0x41
		case 0x41:
			v = r.sleb(32)
		case 0x42:
			r.sleb(64)
		case 0x43:
			r.bytes(4)
		case 0x44:
			r.bytes(8)
		case 0x23, 0xd2:
			r.u32()
		case 0xd0:
			r.byte()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended-const arithmetic
		default:
			r.fail(ErrUnsupported, "opcode %#x in a constant expression", op)
		}
	}
	return 0, false
}

func (m *module) readData(r *reader) {
	n := r.count(2)
	for i := 0; i < n && r.err == nil; i++ {
		flags := r.u32()
		var off int64
		active := false
		switch flags {
		case 0:
			off, active = r.constExpr()
		case 1:
		case 2:
			mem := r.u32()
			off, active = r.constExpr()
			active = active && mem == 0
		default:
			r.fail(ErrMalformed, "data segment %d has flags %d", i, flags)
			return
		}
		data := r.bytes(int(r.u32()))
		if active && r.err == nil {
			m.segments = append(m.segments, segment{addr: uint64(uint32(off)), data: data})
		}
	}
}

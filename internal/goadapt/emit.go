package goadapt

// allocBody is the injected function's code entry (size, locals, code)
// for cabi_realloc_adapter(old_ptr, old_size, align, new_size) -> ptr with
// locals 4 (p) and 5 (end), both i64 so that no sum wraps:
//
//	if old_ptr != 0: unreachable          (the adapter never reallocates)
//	if align == 0 || align&(align-1) != 0: unreachable
//	p = (next + align - 1) &^ (align - 1)
//	end = p + new_size
//	if end > arena end: unreachable       (arena exhausted)
//	next = end; return p
func allocBody(global uint32, arenaEnd uint64) []byte {
	g := appendULEB(nil, uint64(global))
	var b []byte
	b = append(b, 0x20, 0, 0x04, 0x40, 0x00, 0x0b) // local.get 0; if; unreachable; end
	b = append(b, 0x20, 2, 0x45, 0x20, 2, 0x20, 2, 0x41, 1, 0x6b, 0x71, 0x72, 0x04, 0x40, 0x00, 0x0b)
	b = append(append(b, 0x23), g...)                       // global.get next
	b = append(b, 0xad, 0x20, 2, 0xad, 0x7c, 0x42, 1, 0x7d) // i64(next) + i64(align) - 1
	b = append(b, 0x42, 0, 0x20, 2, 0xad, 0x7d, 0x83)       // & (0 - i64(align))
	b = append(b, 0x21, 4, 0x20, 4, 0x20, 3, 0xad, 0x7c, 0x22, 5)
	b = appendSLEB(append(b, 0x42), int64(arenaEnd))
	b = append(b, 0x56, 0x04, 0x40, 0x00, 0x0b) // i64.gt_u; if; unreachable; end
	b = append(b, 0x20, 5, 0xa7, 0x24)
	b = append(b, g...)
	b = append(b, 0x20, 4, 0xa7, 0x0b) // local.get p; i32.wrap_i64; end
	locals := []byte{1, 2, 0x7e}       // one group: two i64
	body := append(locals, b...)
	return append(appendULEB(nil, uint64(len(body))), body...)
}

// emit writes the adapted module: every section copied, the six it
// changes rebuilt with one entry appended.
func (m *module) emit(a Arena) ([]byte, *Error) {
	typeIdx := uint32(m.reallocType)
	if m.reallocType < 0 {
		typeIdx = uint32(m.types)
	}
	funcIdx := uint32(m.importFuncs + m.funcs)
	globIdx := uint32(m.importGlobs + m.globals)
	out := append([]byte(nil), m.b[:8]...)
	for i, s := range m.secs {
		payload := m.b[s.start:s.end]
		var err *Error
		switch {
		case s.id == secType && m.reallocType < 0:
			payload = m.appendEntry(s, []byte(reallocSig))
		case s.id == secFunc:
			payload = m.appendEntry(s, appendULEB(nil, uint64(typeIdx)))
		case s.id == secGlobal:
			payload = m.appendEntry(s, append(appendSLEB([]byte{0x7f, 0x01, 0x41}, int64(int32(uint32(a.Base)))), 0x0b))
		case s.id == secExport:
			payload = m.appendEntry(s, appendULEB(append(appendName(nil, ExportName), 0x00), uint64(funcIdx)))
		case s.id == secCode:
			payload = m.appendEntry(s, allocBody(globIdx, a.Base+a.Size))
		case i == m.nameSec:
			payload, err = m.names(s, funcIdx, globIdx)
		}
		if err != nil {
			return nil, err
		}
		out = append(appendULEB(append(out, s.id), uint64(len(payload))), payload...)
	}
	return out, nil
}

// appendEntry is the vector section s with its count one higher and
// entry after its last element.
func (m *module) appendEntry(s section, entry []byte) []byte {
	r := newReader(m.b, s.start, s.end, sectionNames[s.id])
	n := r.u32() // parse already read it
	out := appendULEB(nil, uint64(n)+1)
	out = append(out, m.b[r.pos:s.end]...)
	return append(out, entry...)
}

func appendName(b []byte, s string) []byte {
	return append(appendULEB(b, uint64(len(s))), s...)
}

// names rewrites the name section: the function names (subsection 1)
// and the global names (7) get the new function's and global's names;
// the other subsections are copied. Each name map must be ascending and
// below the new index, so the appended entry keeps it sorted.
func (m *module) names(s section, funcIdx, globIdx uint32) ([]byte, *Error) {
	r := newReader(m.b, s.start, s.end, "name")
	r.name()
	out := appendName(nil, "name")
	for r.pos < r.end && r.err == nil {
		id := r.byte()
		size := int(r.u32())
		start := r.pos
		body := r.bytes(size)
		if r.err != nil {
			break
		}
		add, idx := "", uint32(0)
		switch id {
		case 1:
			add, idx = ExportName, funcIdx
		case 7:
			add, idx = ExportName+".next", globIdx
		}
		if add != "" {
			sub := newReader(m.b, start, start+size, "name")
			n := sub.nameMap(idx)
			sub.done()
			if sub.err != nil {
				return nil, sub.err
			}
			body = append(append(appendULEB(nil, uint64(n)+1), m.b[sub.mapStart:start+size]...), appendName(appendULEB(nil, uint64(idx)), add)...)
		}
		out = append(appendULEB(append(out, id), uint64(len(body))), body...)
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

package engine

import (
	"errors"
	"fmt"

	"github.com/capsule-host/capsule-host/internal/leb128"
)

// ExternDef is a core module's import (Module set) or export.
type ExternDef struct {
	Module, Name string
	Kind         ExternKind
}

// ErrCoreBinary: the core module's import or export section is malformed.
var ErrCoreBinary = errors.New("malformed core module")

// CoreExterns reads every import and export of a core module, of every
// kind. The engines' own APIs list functions and memories only; linking
// instances together needs tables and globals too, and which module
// names an instance imports at all. Only the import and export sections
// are decoded; the engine validates the rest when it compiles.
func CoreExterns(wasm []byte) (imports, exports []ExternDef, err error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, nil, fmt.Errorf("%w: no wasm preamble", ErrCoreBinary)
	}
	r := &coreReader{b: wasm, p: 8}
	for r.p < len(r.b) && r.err == nil {
		id := r.byte()
		size := int(r.u32())
		if r.err != nil || size > len(r.b)-r.p {
			return nil, nil, fmt.Errorf("%w: section %d runs past the end", ErrCoreBinary, id)
		}
		sec := &coreReader{b: r.b[:r.p+size], p: r.p}
		r.p += size
		switch id {
		case 2:
			imports = sec.externs(true)
		case 7:
			exports = sec.externs(false)
		}
		if sec.err != nil {
			return nil, nil, fmt.Errorf("%w: section %d at byte %d: %v", ErrCoreBinary, id, sec.p, sec.err)
		}
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCoreBinary, r.err)
	}
	return imports, exports, nil
}

type coreReader struct {
	b   []byte
	p   int
	err error
}

func (r *coreReader) byte() byte {
	if r.err != nil || r.p >= len(r.b) {
		r.err = errors.New("unexpected end")
		return 0
	}
	c := r.b[r.p]
	r.p++
	return c
}

func (r *coreReader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	v, n, err := leb128.Unsigned(r.b[r.p:], 32)
	r.p += n
	switch {
	case errors.Is(err, leb128.ErrTruncated):
		r.err = errors.New("unexpected end")
	case errors.Is(err, leb128.ErrTooLarge):
		r.err = errors.New("LEB128 too large for 32 bits")
	case err != nil:
		r.err = errors.New("LEB128 too long")
	}
	return uint32(v)
}

func (r *coreReader) name() string {
	n := int(r.u32())
	if r.err != nil || n > len(r.b)-r.p {
		r.err = errors.New("name runs past the end")
		return ""
	}
	s := string(r.b[r.p : r.p+n])
	r.p += n
	return s
}

func (r *coreReader) limits() {
	if flags := r.byte(); flags&1 != 0 {
		r.u32()
	}
	r.u32()
}

// externs reads an import (imp) or export vector.
func (r *coreReader) externs(imp bool) []ExternDef {
	n := int(r.u32())
	if n > len(r.b)-r.p {
		r.err = errors.New("count exceeds the section")
		return nil
	}
	out := make([]ExternDef, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		var d ExternDef
		if imp {
			d.Module = r.name()
		}
		d.Name = r.name()
		k := r.byte()
		if k > 3 {
			r.err = fmt.Errorf("extern kind %#x (tags are not supported)", k)
			return nil
		}
		d.Kind = ExternKind(k) // the binary's order: func, table, memory, global
		if imp {
			r.importDesc(d.Kind)
		} else {
			r.u32()
		}
		out = append(out, d)
	}
	return out
}

func (r *coreReader) importDesc(k ExternKind) {
	switch k {
	case ExternFunc:
		r.u32()
	case ExternTable:
		r.byte()
		r.limits()
	case ExternMemory:
		r.limits()
	case ExternGlobal:
		r.byte()
		r.byte()
	}
}

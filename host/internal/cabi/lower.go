package cabi

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
	"unsafe"

	"github.com/capsule-host/capsule-host/host/engine"
)

// Lowerer lowers values into one guest's memory, allocating strings and
// lists with the guest's cabi_realloc. Every pointer realloc returns is
// validated (aligned, in bounds) before the host writes through it.
type Lowerer struct {
	Ctx    context.Context
	Caller engine.Caller
}

// alloc is the Canonical ABI's allocate(align, size) = realloc(0, 0, align,
// size) plus the checks store_string/store_list make on its result.
func (l *Lowerer) alloc(align, size uint32, what string) (uint32, error) {
	p, err := l.Caller.Realloc(l.Ctx, 0, 0, align, size)
	if err != nil {
		return 0, fmt.Errorf("cabi_realloc(0, 0, %d, %d) for %s: %w", align, size, what, err)
	}
	if p%align != 0 {
		return 0, abiErr("cabi_realloc returned %#x for %s: not aligned to %d", p, what, align)
	}
	if err := checkRange(l.Caller.Memory(), p, uint64(size), "cabi_realloc result for "+what); err != nil {
		return 0, err
	}
	return p, nil
}

// bytesOut allocates and writes b (a string's or list<u8>'s bytes). An
// empty value takes no allocation: it is lowered as (align, 0), a pointer
// every guest must accept for a zero length (wit-bindgen's own dangling
// pointer convention), saving a guest call.
func (l *Lowerer) bytesOut(b []byte, align uint32, what string) (uint32, uint32, error) {
	if len(b) > MaxLength {
		return 0, 0, abiErr("%s of %d bytes exceeds 2^28-1", what, len(b))
	}
	if len(b) == 0 {
		return align, 0, nil
	}
	p, err := l.alloc(align, uint32(len(b)), what)
	if err != nil {
		return 0, 0, err
	}
	if !l.Caller.Memory().Write(p, b) {
		return 0, 0, abiErr("%s write at %#x out of bounds", what, p)
	}
	return p, uint32(len(b)), nil
}

func strBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// StoreString lowers a string (store_string) and returns (ptr, len). A Go
// string may hold any bytes; a guest may rely on UTF-8 (Rust does, unsafely),
// so invalid UTF-8 is refused rather than passed on.
func (l *Lowerer) StoreString(s string) (uint32, uint32, error) {
	if !utf8.ValidString(s) {
		return 0, 0, fmt.Errorf("%w: host string %q is not valid UTF-8", ErrABI, truncate(s))
	}
	return l.bytesOut(strBytes(s), 1, "string")
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// StoreBytes allocates len(b) bytes aligned to align and writes b there,
// as store_list does with a list's element buffer once its elements are
// laid out: for a ListLowerer. An empty b takes no allocation (align, 0).
func (l *Lowerer) StoreBytes(b []byte, align uint32, what string) (uint32, uint32, error) {
	return l.bytesOut(b, align, what)
}

// ListLowerer is a list value that lowers itself: a hand-written
// store_list for one element type, which writes the elements' layout
// straight into one buffer where the generic path boxes every field as a
// Value first (list<process-info>, host/process). storeList hands it the
// element type; it must write byte for byte what the generic path writes
// for the same values, with the same cabi_realloc calls in the same order
// (its tests compare the two).
type ListLowerer interface {
	LowerList(l *Lowerer, elem *Type) (ptr, n uint32, err error)
}

// At wraps err with the place it happened ("[3]", ".id"), as the generic
// path names a failing field, for a ListLowerer's errors.
func At(place string, err error) error { return at(place, err) }

// storeList lowers list<elem> (store_list) and returns (ptr, len).
func (l *Lowerer) storeList(elem *Type, v Value) (uint32, uint32, error) {
	if ll, ok := v.(ListLowerer); ok {
		return ll.LowerList(l, elem)
	}
	if elem.kind == KU8 {
		b, ok := v.([]byte)
		if !ok {
			return 0, 0, badValue(List(elem), v)
		}
		return l.bytesOut(b, 1, "list<u8>")
	}
	vs, ok := v.([]Value)
	if !ok {
		return 0, 0, badValue(List(elem), v)
	}
	byteLen := uint64(len(vs)) * uint64(elem.size)
	if byteLen > MaxLength {
		return 0, 0, abiErr("list<%s> of %d elements exceeds 2^28-1 bytes", elem, len(vs))
	}
	if len(vs) == 0 {
		return elem.align, 0, nil
	}
	buf := make([]byte, byteLen)
	for i, e := range vs {
		if err := l.store(elem, buf, uint32(i)*elem.size, e); err != nil {
			return 0, 0, at(fmt.Sprintf("[%d]", i), err)
		}
	}
	// Allocate after the elements: their strings are allocated first, so
	// the buffer is written in one piece.
	p, err := l.alloc(elem.align, uint32(byteLen), "list<"+elem.String()+">")
	if err != nil {
		return 0, 0, err
	}
	if !l.Caller.Memory().Write(p, buf) {
		return 0, 0, abiErr("list write at %#x out of bounds", p)
	}
	return p, uint32(len(vs)), nil
}

// Store lowers v into guest memory at ptr (store), after checking that ptr
// is aligned for t and the value fits in memory.
func (l *Lowerer) Store(t *Type, ptr uint32, v Value) error {
	mem := l.Caller.Memory()
	if ptr%t.align != 0 {
		return abiErr("return pointer %#x not aligned to %d for %s", ptr, t.align, t)
	}
	if err := checkRange(mem, ptr, uint64(t.size), "return area for "+t.String()); err != nil {
		return err
	}
	buf := make([]byte, t.size)
	if err := l.store(t, buf, 0, v); err != nil {
		return err
	}
	if !mem.Write(ptr, buf) {
		return abiErr("return area %#x out of bounds", ptr)
	}
	return nil
}

func badValue(t *Type, v Value) error {
	return fmt.Errorf("%w: host value %T does not match %s", ErrABI, v, t)
}

// store encodes v as t into buf[off:], allocating nested strings and lists
// in guest memory.
func (l *Lowerer) store(t *Type, buf []byte, off uint32, v Value) error {
	le := binary.LittleEndian
	switch t.kind {
	case KString:
		s, ok := v.(string)
		if !ok {
			return badValue(t, v)
		}
		p, n, err := l.StoreString(s)
		if err != nil {
			return err
		}
		le.PutUint32(buf[off:], p)
		le.PutUint32(buf[off+4:], n)
		return nil
	case KList:
		p, n, err := l.storeList(t.elem, v)
		if err != nil {
			return err
		}
		le.PutUint32(buf[off:], p)
		le.PutUint32(buf[off+4:], n)
		return nil
	case KRecord:
		vs, ok := v.([]Value)
		if !ok || len(vs) != len(t.fields) {
			return badValue(t, v)
		}
		for i, f := range t.fields {
			if err := l.store(f.Type, buf, off+t.offsets[i], vs[i]); err != nil {
				return atName(f.Name, err)
			}
		}
		return nil
	case KEnum:
		d, ok := v.(uint32)
		if !ok || d >= uint32(len(t.cases)) {
			return badValue(t, v)
		}
		storeUint(buf[off:], t.discSize, uint64(d))
		return nil
	case KVariant, KOption, KResult:
		vv, ok := v.(Variant)
		if !ok || vv.Case >= uint32(len(t.cases)) {
			return badValue(t, v)
		}
		storeUint(buf[off:], t.discSize, uint64(vv.Case))
		if c := t.cases[vv.Case]; c.Type != nil {
			if err := l.store(c.Type, buf, off+t.payloadOff, vv.Payload); err != nil {
				return atName(c.Name, err)
			}
		}
		return nil
	}
	bits, err := scalarBits(t, v)
	if err != nil {
		return err
	}
	storeUint(buf[off:], t.size, bits)
	return nil
}

func storeUint(b []byte, size uint32, v uint64) {
	switch size {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

// scalarBits returns a primitive's bits, zero-extended to 64 (which is
// also its flat slot value, i32 slots zero-extended into joined i64 ones).
func scalarBits(t *Type, v Value) (uint64, error) {
	switch x := v.(type) {
	case bool:
		if t.kind == KBool {
			if x {
				return 1, nil
			}
			return 0, nil
		}
	case uint8:
		if t.kind == KU8 {
			return uint64(x), nil
		}
	case uint16:
		if t.kind == KU16 {
			return uint64(x), nil
		}
	case uint32:
		if t.kind == KU32 || t.kind == KOwn || t.kind == KBorrow {
			return uint64(x), nil
		}
	case uint64:
		if t.kind == KU64 {
			return x, nil
		}
	case int8:
		if t.kind == KS8 {
			return uint64(uint8(x)), nil
		}
	case int16:
		if t.kind == KS16 {
			return uint64(uint16(x)), nil
		}
	case int32: // also rune (char)
		if t.kind == KS32 {
			return uint64(uint32(x)), nil
		}
		if t.kind == KChar && x >= 0 && x < 0x110000 && (x < 0xD800 || x > 0xDFFF) {
			return uint64(x), nil
		}
	case int64:
		if t.kind == KS64 {
			return uint64(x), nil
		}
	case float32:
		if t.kind == KF32 {
			return uint64(math.Float32bits(x)), nil
		}
	case float64:
		if t.kind == KF64 {
			return math.Float64bits(x), nil
		}
	}
	return 0, badValue(t, v)
}

// LowerFlat lowers v to flat core values (lower_flat), appending to out.
func (l *Lowerer) LowerFlat(t *Type, v Value, out []uint64) ([]uint64, error) {
	switch t.kind {
	case KString:
		s, ok := v.(string)
		if !ok {
			return nil, badValue(t, v)
		}
		p, n, err := l.StoreString(s)
		if err != nil {
			return nil, err
		}
		return append(out, uint64(p), uint64(n)), nil
	case KList:
		p, n, err := l.storeList(t.elem, v)
		if err != nil {
			return nil, err
		}
		return append(out, uint64(p), uint64(n)), nil
	case KRecord:
		vs, ok := v.([]Value)
		if !ok || len(vs) != len(t.fields) {
			return nil, badValue(t, v)
		}
		for i, f := range t.fields {
			var err error
			if out, err = l.LowerFlat(f.Type, vs[i], out); err != nil {
				return nil, atName(f.Name, err)
			}
		}
		return out, nil
	case KEnum:
		d, ok := v.(uint32)
		if !ok || d >= uint32(len(t.cases)) {
			return nil, badValue(t, v)
		}
		return append(out, uint64(d)), nil
	case KVariant, KOption, KResult:
		vv, ok := v.(Variant)
		if !ok || vv.Case >= uint32(len(t.cases)) {
			return nil, badValue(t, v)
		}
		start := len(out)
		out = append(out, uint64(vv.Case))
		if c := t.cases[vv.Case]; c.Type != nil {
			var err error
			if out, err = l.LowerFlat(c.Type, vv.Payload, out); err != nil {
				return nil, atName(c.Name, err)
			}
		}
		// Unused joined slots are zero.
		for len(out) < start+len(t.flat) {
			out = append(out, 0)
		}
		return out, nil
	}
	bits, err := scalarBits(t, v)
	if err != nil {
		return nil, err
	}
	return append(out, bits), nil
}

package cabi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
	"unsafe"

	"github.com/capsule-host/capsule-host/host/engine"
)

// Value is the Go form of a WIT value, by kind:
//
//	bool                      bool
//	u8 u16 u32 u64            uint8 uint16 uint32 uint64
//	s8 s16 s32 s64            int8 int16 int32 int64
//	f32 f64                   float32 float64
//	char                      rune
//	string                    string
//	list<u8>                  []byte
//	list<T>                   []Value
//	record (and tuple)        []Value, one per field
//	variant, option, result   Variant
//	enum                      uint32 (the case index)
//	own, borrow               uint32 (the handle index)
type Value = any

// Variant is a variant, option or result value. For option, case 0 is none
// and 1 is some; for result, 0 is ok and 1 is error. Payload is nil for a
// case without payload.
type Variant struct {
	Case    uint32
	Payload Value
}

// None is option's none.
var None = Variant{Case: 0}

// Some is option's some(v).
func Some(v Value) Variant { return Variant{1, v} }

// Ok is result's ok(v) (v nil for `_`).
func Ok(v Value) Variant { return Variant{0, v} }

// Err is result's error(v) (v nil for `_`).
func Err(v Value) Variant { return Variant{1, v} }

// ErrABI is the class of every lifting or lowering failure: a guest broke
// the Canonical ABI (or, on lowering, its cabi_realloc misbehaved). The
// host traps the call with the message.
var ErrABI = errors.New("canonical ABI violation")

func abiErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrABI}, args...)...)
}

// at wraps a nested error with the place it happened (field, case, index),
// so a trap names the path: "request.env[2].key: invalid UTF-8 ...".
func at(place string, err error) error {
	var pe *pathError
	if errors.As(err, &pe) {
		return &pathError{path: place + pe.path, err: pe.err}
	}
	return &pathError{path: place, err: err}
}

type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// flatIn reads flat core values in order. Every slot is a raw uint64; an
// i32 slot read into a narrower or i32 type is wrapped, which is exactly
// the Canonical ABI's coercion of an i64-joined variant slot.
type flatIn struct {
	vals []uint64
	i    int
}

func (f *flatIn) next() (uint64, error) {
	if f.i >= len(f.vals) {
		return 0, abiErr("too few flat values")
	}
	v := f.vals[f.i]
	f.i++
	return v, nil
}

// LiftBudget bounds the bytes one lift copies out of guest memory in
// total. The per-value cap (MaxLength) alone would let a list of N strings
// that all point at the same large range make the host copy N times that
// range; a whole lift is capped at one value's worth instead.
const LiftBudget = MaxLength

// lifter is one lift: the guest memory and what is left of the budget.
type lifter struct {
	mem  engine.Memory
	left int64
}

func newLifter(mem engine.Memory) lifter { return lifter{mem: mem, left: LiftBudget} }

// charge takes n bytes (host memory the lift will hold) from the budget.
func (lf *lifter) charge(n uint64, what string) error {
	if n > uint64(lf.left) {
		return abiErr("%s: the call's arguments exceed the host's %d-byte lift budget", what, LiftBudget)
	}
	lf.left -= int64(n)
	return nil
}

// LiftFlat lifts one value of type t from flat core values; strings and
// lists are copied out of mem.
func LiftFlat(mem engine.Memory, t *Type, vals []uint64) (Value, error) {
	in := flatIn{vals: vals}
	lf := newLifter(mem)
	return lf.liftFlat(t, &in)
}

func (lf *lifter) liftFlat(t *Type, in *flatIn) (Value, error) {
	switch t.kind {
	case KString, KList:
		p, err := in.next()
		if err != nil {
			return nil, err
		}
		n, err := in.next()
		if err != nil {
			return nil, err
		}
		if t.kind == KString {
			return lf.loadString(uint32(p), uint32(n))
		}
		return lf.loadList(t.elem, uint32(p), uint32(n))
	case KRecord:
		out := make([]Value, len(t.fields))
		for i, f := range t.fields {
			v, err := lf.liftFlat(f.Type, in)
			if err != nil {
				return nil, atName(f.Name, err)
			}
			out[i] = v
		}
		return out, nil
	case KVariant, KOption, KResult, KEnum:
		start := in.i
		d, err := in.next()
		if err != nil {
			return nil, err
		}
		c, err := t.caseOf(uint32(d))
		if err != nil {
			return nil, err
		}
		if t.kind == KEnum {
			return uint32(d), nil
		}
		var pv Value
		if c.Type != nil {
			pv, err = lf.liftFlat(c.Type, in)
			if err != nil {
				return nil, atName(c.Name, err)
			}
		}
		// Skip the unused joined slots of other cases.
		in.i = start + len(t.flat)
		if in.i > len(in.vals) {
			return nil, abiErr("too few flat values")
		}
		return Variant{uint32(d), pv}, nil
	}
	v, err := in.next()
	if err != nil {
		return nil, err
	}
	return scalar(t, v)
}

// atName names a record field or variant case in an error path.
func atName(name string, err error) error { return at("."+name, err) }

func (t *Type) caseOf(d uint32) (Case, error) {
	if d >= uint32(len(t.cases)) {
		return Case{}, abiErr("%s discriminant %d out of range (%d cases)", t, d, len(t.cases))
	}
	return t.cases[d], nil
}

// scalar converts the raw bits of a primitive (flat slot or loaded bytes,
// zero-extended) to its Go value.
func scalar(t *Type, v uint64) (Value, error) {
	switch t.kind {
	case KBool:
		return uint32(v) != 0, nil
	case KU8:
		return uint8(v), nil
	case KU16:
		return uint16(v), nil
	case KU32:
		return uint32(v), nil
	case KU64:
		return v, nil
	case KS8:
		return int8(v), nil
	case KS16:
		return int16(v), nil
	case KS32:
		return int32(uint32(v)), nil
	case KS64:
		return int64(v), nil
	case KF32:
		return math.Float32frombits(uint32(v)), nil
	case KF64:
		return math.Float64frombits(v), nil
	case KChar:
		r := uint32(v)
		if r >= 0x110000 || (r >= 0xD800 && r <= 0xDFFF) {
			return nil, abiErr("char %#x is not a Unicode scalar value", r)
		}
		return rune(r), nil
	case KOwn, KBorrow:
		return uint32(v), nil
	}
	return nil, abiErr("cannot lift %s as a scalar", t)
}

// checkRange validates [ptr, ptr+n) against memory.
func checkRange(mem engine.Memory, ptr uint32, n uint64, what string) error {
	if uint64(ptr)+n > uint64(mem.Size()) {
		return abiErr("%s [%#x, +%d) out of bounds (memory is %d bytes)", what, ptr, n, mem.Size())
	}
	return nil
}

// LoadString copies a UTF-8 string out of guest memory (load_string).
func LoadString(mem engine.Memory, ptr, n uint32) (string, error) {
	lf := newLifter(mem)
	return lf.loadString(ptr, n)
}

func (lf *lifter) loadString(ptr, n uint32) (string, error) {
	mem := lf.mem
	if n > MaxLength {
		return "", abiErr("string length %d exceeds 2^28-1", n)
	}
	if err := checkRange(mem, ptr, uint64(n), "string"); err != nil {
		return "", err
	}
	if err := lf.charge(uint64(n), "string"); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	b, ok := mem.Read(ptr, n)
	if !ok {
		return "", abiErr("string [%#x, +%d) out of bounds", ptr, n)
	}
	if !utf8.Valid(b) {
		return "", abiErr("string at %#x is not valid UTF-8 (first bad byte at offset %d)", ptr, firstInvalid(b))
	}
	// b is our private copy and never written again: share it.
	return unsafe.String(&b[0], len(b)), nil
}

func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, sz := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && sz <= 1 {
			return i
		}
		i += sz
	}
	return -1
}

// LoadList copies list<elem> out of guest memory (load_list).
func LoadList(mem engine.Memory, elem *Type, ptr, n uint32) (Value, error) {
	lf := newLifter(mem)
	return lf.loadList(elem, ptr, n)
}

func (lf *lifter) loadList(elem *Type, ptr, n uint32) (Value, error) {
	mem := lf.mem
	byteLen := uint64(n) * uint64(elem.size)
	if byteLen > MaxLength || n > MaxLength {
		return nil, abiErr("list<%s> of %d elements exceeds 2^28-1 bytes", elem, n)
	}
	if ptr%elem.align != 0 {
		return nil, abiErr("list<%s> pointer %#x not aligned to %d", elem, ptr, elem.align)
	}
	if err := checkRange(mem, ptr, byteLen, "list<"+elem.String()+">"); err != nil {
		return nil, err
	}
	cost := byteLen
	if elem.kind != KU8 {
		cost += uint64(n) * 16 // one interface per element
	}
	if err := lf.charge(cost, "list<"+elem.String()+">"); err != nil {
		return nil, err
	}
	var buf []byte
	if byteLen > 0 {
		var ok bool
		if buf, ok = mem.Read(ptr, uint32(byteLen)); !ok {
			return nil, abiErr("list [%#x, +%d) out of bounds", ptr, byteLen)
		}
	}
	if elem.kind == KU8 {
		if buf == nil {
			buf = []byte{}
		}
		return buf, nil
	}
	out := make([]Value, n)
	for i := range out {
		v, err := lf.load(elem, buf, uint32(i)*elem.size)
		if err != nil {
			return nil, at(fmt.Sprintf("[%d]", i), err)
		}
		out[i] = v
	}
	return out, nil
}

// Load reads a value of type t at ptr in guest memory (load), checking
// alignment and bounds.
func Load(mem engine.Memory, t *Type, ptr uint32) (Value, error) {
	if ptr%t.align != 0 {
		return nil, abiErr("%s pointer %#x not aligned to %d", t, ptr, t.align)
	}
	if err := checkRange(mem, ptr, uint64(t.size), t.String()); err != nil {
		return nil, err
	}
	buf, ok := mem.Read(ptr, t.size)
	if !ok {
		return nil, abiErr("%s at %#x out of bounds", t, ptr)
	}
	lf := newLifter(mem)
	return lf.load(t, buf, 0)
}

// load decodes t from buf[off:] (a copy of guest memory that holds the
// whole value); strings and lists are read from mem.
func (lf *lifter) load(t *Type, buf []byte, off uint32) (Value, error) {
	le := binary.LittleEndian
	switch t.kind {
	case KString, KList:
		p, n := le.Uint32(buf[off:]), le.Uint32(buf[off+4:])
		if t.kind == KString {
			return lf.loadString(p, n)
		}
		return lf.loadList(t.elem, p, n)
	case KRecord:
		out := make([]Value, len(t.fields))
		for i, f := range t.fields {
			v, err := lf.load(f.Type, buf, off+t.offsets[i])
			if err != nil {
				return nil, atName(f.Name, err)
			}
			out[i] = v
		}
		return out, nil
	case KVariant, KOption, KResult, KEnum:
		d := uint32(loadUint(buf[off:], t.discSize))
		c, err := t.caseOf(d)
		if err != nil {
			return nil, err
		}
		if t.kind == KEnum {
			return d, nil
		}
		var pv Value
		if c.Type != nil {
			if pv, err = lf.load(c.Type, buf, off+t.payloadOff); err != nil {
				return nil, atName(c.Name, err)
			}
		}
		return Variant{d, pv}, nil
	}
	return scalar(t, loadUint(buf[off:], t.size))
}

func loadUint(b []byte, size uint32) uint64 {
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

package abi

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Little-endian scalar access to a laid-out value.
func GetU8(b []byte, off uint32) uint8   { return b[off] }
func GetU32(b []byte, off uint32) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
func GetU64(b []byte, off uint32) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
func GetS32(b []byte, off uint32) int32  { return int32(GetU32(b, off)) }

// GetBool lifts a bool: any nonzero byte is true (convert_int_to_bool).
func GetBool(b []byte, off uint32) bool { return b[off] != 0 }

func PutU8(b []byte, off uint32, v uint8)   { b[off] = v }
func PutU32(b []byte, off uint32, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }
func PutU64(b []byte, off uint32, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
func PutBool(b []byte, off uint32, v bool) {
	if v {
		b[off] = 1
	} else {
		b[off] = 0
	}
}

// Lifter copies strings and lists out of host-written memory. The first
// problem is kept in Err and later reads return zero values, so a binding
// lifts a whole result and checks once. A problem means the host broke the
// ABI; bindings report it as an internal error rather than trapping, so a
// tool can still answer.
type Lifter struct {
	M   *Scope
	Err error
}

// maxListBytes is the Canonical ABI's bound on a string or list.
const maxListBytes = 1<<28 - 1

func (l *Lifter) failf(format string, args ...any) {
	if l.Err == nil {
		l.Err = fmt.Errorf("abi: "+format, args...)
	}
}

// view returns the n*size bytes of a (ptr, n) list of elements.
func (l *Lifter) view(ptr, n uint32, elem Type, what string) []byte {
	if l.Err != nil {
		return nil
	}
	total := uint64(n) * uint64(elem.Size)
	if total > maxListBytes {
		l.failf("%s: length %d exceeds the 2^28-1 byte limit", what, n)
		return nil
	}
	if ptr%elem.Align != 0 && total > 0 {
		l.failf("%s: pointer %#x is not %d-aligned", what, ptr, elem.Align)
		return nil
	}
	v, ok := l.M.Load(ptr, uint32(total))
	if !ok {
		l.failf("%s: range [%#x, +%d) is not memory the host allocated with cabi_realloc", what, ptr, total)
		return nil
	}
	return v
}

// String lifts the string whose (ptr, len) is at b[off:].
func (l *Lifter) String(b []byte, off uint32, what string) string {
	v := l.view(GetU32(b, off), GetU32(b, off+4), U8, what)
	if l.Err != nil {
		return ""
	}
	if !utf8.Valid(v) {
		l.failf("%s: invalid UTF-8", what)
		return ""
	}
	return string(v)
}

// Bytes lifts (a copy of) the list<u8> whose (ptr, len) is at b[off:].
// An empty list is a non-nil empty slice.
func (l *Lifter) Bytes(b []byte, off uint32, what string) []byte {
	v := l.view(GetU32(b, off), GetU32(b, off+4), U8, what)
	if l.Err != nil {
		return nil
	}
	return append([]byte{}, v...)
}

// List returns the elements of the list whose (ptr, len) is at b[off:],
// each as a view of elem.Size bytes.
func (l *Lifter) List(b []byte, off uint32, elem Type, what string) [][]byte {
	n := GetU32(b, off+4)
	v := l.view(GetU32(b, off), n, elem, what)
	if l.Err != nil {
		return nil
	}
	out := make([][]byte, n)
	for i := range out {
		s := uint32(i) * elem.Size
		out[i] = v[s : s+elem.Size : s+elem.Size]
	}
	return out
}

// LiftList lifts the list whose (ptr, len) is at b[off:], each element
// of layout elem with lift.
func LiftList[T any](l *Lifter, b []byte, off uint32, elem Type, what string, lift func(*Lifter, []byte, uint32) T) []T {
	elems := l.List(b, off, elem, what)
	out := make([]T, 0, len(elems))
	for _, e := range elems {
		out = append(out, lift(l, e, 0))
	}
	return out
}

// Case reads a variant discriminant and checks it is below n.
func (l *Lifter) Case(b []byte, off uint32, n int, what string) int {
	if l.Err != nil {
		return 0
	}
	var d uint32
	switch discSize(n) {
	case 1:
		d = uint32(b[off])
	case 2:
		d = uint32(binary.LittleEndian.Uint16(b[off:]))
	default:
		d = GetU32(b, off)
	}
	if d >= uint32(n) {
		l.failf("%s: discriminant %d out of range (%d cases)", what, d, n)
		return 0
	}
	return int(d)
}

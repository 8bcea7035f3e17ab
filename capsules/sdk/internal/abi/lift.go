package abi

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
	"unsafe"
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

	slab []uint64 // where Box carves its values from
}

// slabWords is how many Box values share one allocation.
const slabWords = 64

// Scalar is what Box can hold: a type without pointers of at most 8
// bytes.
type Scalar interface {
	~bool | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~int8 | ~int16 | ~int32 | ~int64
}

// Box returns a pointer to a copy of v, as &v would, for the optional
// fields bindings lift (*uint32, *uint64, ...). The values of a lift share
// 64-word slabs: a list of 500 process-infos has some 2,000 of them, and
// one allocation each was a third of its lift in the guest. A slab is
// plain memory (no pointers), so each word may hold any Scalar.
func Box[T Scalar](l *Lifter, v T) *T {
	if len(l.slab) == 0 {
		l.slab = make([]uint64, slabWords)
	}
	p := (*T)(unsafe.Pointer(&l.slab[0]))
	l.slab = l.slab[1:]
	*p = v
	return p
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

// String lifts the string whose (ptr, len) is at b[off:]. It is a view
// of the scope's memory, not a copy: that memory is never handed out
// again nor written once the call is over (alloc.go), and the view keeps
// its chunk alive, so the string is as immutable as Go requires. A copy
// per string was most of a large list's lift.
func (l *Lifter) String(b []byte, off uint32, what string) string {
	ptr, n := GetU32(b, off), GetU32(b, off+4)
	if n == 0 || l.Err != nil {
		return ""
	}
	v, ok := l.M.Load(ptr, n)
	if !ok || n > maxListBytes {
		l.view(ptr, n, U8, what) // records why
		return ""
	}
	if !validUTF8(v) {
		l.failf("%s: invalid UTF-8", what)
		return ""
	}
	return unsafe.String(&v[0], len(v))
}

// validUTF8 is utf8.Valid with a cheaper check for pure ASCII, nearly
// every string a host lowers: 8 bytes a step and an overlapping last
// word, no loop over single bytes (in the guest every loop iteration
// pays the engine's termination check).
func validUTF8(v []byte) bool {
	var acc uint64
	if n := len(v); n >= 8 {
		for i := 0; i+8 <= n; i += 8 {
			acc |= binary.LittleEndian.Uint64(v[i:])
		}
		acc |= binary.LittleEndian.Uint64(v[n-8:])
	} else {
		var w [8]byte
		copy(w[:], v)
		acc = binary.LittleEndian.Uint64(w[:])
	}
	return acc&0x8080808080808080 == 0 || utf8.Valid(v)
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
	n := GetU32(b, off+4)
	v := l.view(GetU32(b, off), n, elem, what)
	if l.Err != nil {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = lift(l, v, uint32(i)*elem.Size)
	}
	return out
}

// Case reads a variant discriminant and checks it is below n. The
// common path (a one-byte discriminant in range, no earlier problem) is
// straight-line code: in the guest every taken branch costs the engine's
// termination check.
func (l *Lifter) Case(b []byte, off uint32, n int, what string) int {
	var d uint32
	if n <= 1<<8 {
		d = uint32(b[off])
	} else if n <= 1<<16 {
		d = uint32(binary.LittleEndian.Uint16(b[off:]))
	} else {
		d = GetU32(b, off)
	}
	if d >= uint32(n) || l.Err != nil {
		if l.Err == nil {
			l.failf("%s: discriminant %d out of range (%d cases)", what, d, n)
		}
		return 0
	}
	return int(d)
}

// Package abi is the guest half of the Canonical ABI (wasm32, UTF-8
// strings, the "legacy" core-module convention wit-bindgen emits).
//
// Everything in this file and in lift.go/lower.go is plain Go over byte
// slices and 32-bit guest addresses, so it compiles and is unit-tested on
// the host too. Only wasm.go (GOOS=wasip1) touches real linear memory.
package abi

// Core is a core wasm value type in a flattened signature.
type Core byte

const (
	I32 Core = iota
	I64
	F32
	F64
)

func (c Core) String() string { return [...]string{"i32", "i64", "f32", "f64"}[c] }

// MaxFlatParams and MaxFlatResults are the synchronous canon lower limits:
// more flat params than this are passed through a pointer to a tuple, more
// flat results than this through a return pointer.
const (
	MaxFlatParams  = 16
	MaxFlatResults = 1
)

// Type is the layout of one WIT type: its size and alignment in linear
// memory and its flattened core types. Offs holds the field offsets of a
// record; Payload the payload offset of a variant.
//
// The layouts are computed at package init from the WIT type structure
// rather than written as constants, so an offset cannot drift from the
// rules it follows (CanonicalABI.md, "Alignment", "Element Size",
// "Flattening").
type Type struct {
	Size, Align uint32
	Flat        []Core
	Offs        []uint32
	Payload     uint32
}

// AlignTo rounds off up to a multiple of a (a power of two).
func AlignTo(off, a uint32) uint32 { return (off + a - 1) &^ (a - 1) }

var (
	U8     = Type{Size: 1, Align: 1, Flat: []Core{I32}}
	Bool   = U8
	U16    = Type{Size: 2, Align: 2, Flat: []Core{I32}}
	U32    = Type{Size: 4, Align: 4, Flat: []Core{I32}}
	S32    = U32
	Handle = U32
	U64    = Type{Size: 8, Align: 8, Flat: []Core{I64}}
	String = Type{Size: 8, Align: 4, Flat: []Core{I32, I32}}
)

// List is list<elem>: (ptr, len) whatever the element.
func List() Type { return String }

// Record lays out fields in order; Offs receives each field's offset.
func Record(fields ...Type) Type {
	var t Type
	t.Align = 1
	var off uint32
	for _, f := range fields {
		off = AlignTo(off, f.Align)
		t.Offs = append(t.Offs, off)
		off += f.Size
		t.Align = max(t.Align, f.Align)
		t.Flat = append(t.Flat, f.Flat...)
	}
	t.Size = AlignTo(off, t.Align)
	return t
}

// Tuple is a record of unnamed fields.
func Tuple(fields ...Type) Type { return Record(fields...) }

// discSize is the discriminant width for n cases.
func discSize(n int) uint32 {
	switch {
	case n <= 1<<8:
		return 1
	case n <= 1<<16:
		return 2
	}
	return 4
}

// Variant lays out a variant; a nil case has no payload.
func Variant(cases ...*Type) Type {
	d := discSize(len(cases))
	maxAlign, maxSize := uint32(1), uint32(0)
	var flat []Core
	for _, c := range cases {
		if c == nil {
			continue
		}
		maxAlign = max(maxAlign, c.Align)
		maxSize = max(maxSize, c.Size)
		for i, ct := range c.Flat {
			if i < len(flat) {
				flat[i] = join(flat[i], ct)
			} else {
				flat = append(flat, ct)
			}
		}
	}
	t := Type{Align: max(d, maxAlign)}
	t.Payload = AlignTo(d, maxAlign)
	t.Size = AlignTo(t.Payload+maxSize, t.Align)
	t.Flat = append([]Core{I32}, flat...)
	return t
}

// join is the flat slot type shared by two case payloads.
func join(a, b Core) Core {
	if a == b {
		return a
	}
	if (a == I32 && b == F32) || (a == F32 && b == I32) {
		return I32
	}
	return I64
}

// Enum is a variant of n payload-less cases.
func Enum(n int) Type { return Variant(make([]*Type, n)...) }

// Option is option<t>.
func Option(t Type) Type { return Variant(nil, &t) }

// Result is result<ok, err>; nil means no payload.
func Result(ok, err *Type) Type { return Variant(ok, err) }

// Ptr returns &t, for Variant and Result arguments.
func Ptr(t Type) *Type { return &t }

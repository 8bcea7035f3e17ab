// Package cabi is the engine-neutral Canonical ABI toolkit of the host: type
// descriptors with their wasm32 layout and flattening, lifting and lowering
// of values (flat and in linear memory), the import/export calling
// conventions (more than 16 flat params through a pointer, more than one
// flat result through a return pointer) and per-instance handle tables.
//
// The authority is WebAssembly/component-model design/mvp/CanonicalABI.md.
// Names of helpers follow its Python definitions (flatten, load, store,
// lift_flat, lower_flat, elem_size, alignment) so that a reader can check
// one against the other.
//
// Values are plain Go values (see Value); a descriptor says how to read and
// write them. Host bindings declare a Func from descriptors once and never
// compute an offset by hand.
package cabi

import (
	"fmt"
	"strings"

	"github.com/capsule-host/capsule-host/host/engine"
)

// MaxLength caps string byte lengths and list byte lengths, lifted or
// lowered (2^28-1, the Canonical ABI's current bound; it also bounds what a
// guest can make the host copy in one value).
const MaxLength = 1<<28 - 1

// Kind is a WIT type constructor after despecialization.
type Kind uint8

const (
	KBool Kind = iota + 1
	KU8
	KU16
	KU32
	KU64
	KS8
	KS16
	KS32
	KS64
	KF32
	KF64
	KChar
	KString
	KList
	KRecord
	KVariant
	KEnum
	KOption
	KResult
	KOwn
	KBorrow
)

// Field is a named record field.
type Field struct {
	Name string
	Type *Type
}

// F builds a Field.
func F(name string, t *Type) Field { return Field{name, t} }

// Case is a named variant case; Type is nil for a case without payload.
type Case struct {
	Name string
	Type *Type
}

// C builds a Case.
func C(name string, t *Type) Case { return Case{name, t} }

// Type describes a WIT value type and caches its wasm32 layout. Types are
// immutable after construction and safe to share.
type Type struct {
	kind   Kind
	name   string // records, variants, enums, resources
	elem   *Type  // list
	fields []Field
	cases  []Case // variant, option, result, enum

	size, align uint32
	offsets     []uint32 // record field offsets
	discSize    uint32   // variant/enum discriminant byte size
	payloadOff  uint32   // variant payload offset
	flat        []engine.ValueType
}

// Primitive types.
var (
	Bool   = prim(KBool, 1, engine.I32)
	U8     = prim(KU8, 1, engine.I32)
	U16    = prim(KU16, 2, engine.I32)
	U32    = prim(KU32, 4, engine.I32)
	U64    = prim(KU64, 8, engine.I64)
	S8     = prim(KS8, 1, engine.I32)
	S16    = prim(KS16, 2, engine.I32)
	S32    = prim(KS32, 4, engine.I32)
	S64    = prim(KS64, 8, engine.I64)
	F32    = prim(KF32, 4, engine.F32)
	F64    = prim(KF64, 8, engine.F64)
	Char   = prim(KChar, 4, engine.I32)
	String = &Type{kind: KString, size: 8, align: 4, flat: []engine.ValueType{engine.I32, engine.I32}}
)

func prim(k Kind, size uint32, vt engine.ValueType) *Type {
	return &Type{kind: k, size: size, align: size, flat: []engine.ValueType{vt}}
}

// List is list<elem>.
func List(elem *Type) *Type {
	return &Type{kind: KList, elem: elem, size: 8, align: 4, flat: []engine.ValueType{engine.I32, engine.I32}}
}

// Own is own<resource>, a handle index.
func Own(resource string) *Type {
	return &Type{kind: KOwn, name: resource, size: 4, align: 4, flat: []engine.ValueType{engine.I32}}
}

// Borrow is borrow<resource>, a handle index.
func Borrow(resource string) *Type {
	return &Type{kind: KBorrow, name: resource, size: 4, align: 4, flat: []engine.ValueType{engine.I32}}
}

// Record is a record (or, unnamed, a tuple).
func Record(name string, fields ...Field) *Type {
	t := &Type{kind: KRecord, name: name, fields: fields, align: 1}
	var off uint32
	for _, f := range fields {
		off = alignTo(off, f.Type.align)
		t.offsets = append(t.offsets, off)
		off += f.Type.size
		t.align = max(t.align, f.Type.align)
		t.flat = append(t.flat, f.Type.flat...)
	}
	t.size = alignTo(off, t.align)
	return t
}

// VariantOf is a variant type (Variant is its value); Option, Result and Enum despecialize to it.
func VariantOf(name string, cases ...Case) *Type { return variant(KVariant, name, cases) }

// Option is option<t>: variant { none, some(t) }.
func Option(t *Type) *Type { return variant(KOption, "", []Case{{"none", nil}, {"some", t}}) }

// Result is result<ok, err>; nil stands for `_`.
func Result(ok, err *Type) *Type { return variant(KResult, "", []Case{{"ok", ok}, {"error", err}}) }

// Enum is an enum: a variant whose cases carry nothing. Its Go value is
// the case index as a uint32.
func Enum(name string, cases ...string) *Type {
	cs := make([]Case, len(cases))
	for i, c := range cases {
		cs[i] = Case{Name: c}
	}
	return variant(KEnum, name, cs)
}

func variant(k Kind, name string, cases []Case) *Type {
	if len(cases) == 0 {
		panic("cabi: variant without cases")
	}
	t := &Type{kind: k, name: name, cases: cases}
	switch n := len(cases); {
	case n <= 1<<8:
		t.discSize = 1
	case n <= 1<<16:
		t.discSize = 2
	default:
		t.discSize = 4
	}
	var caseAlign, caseSize uint32 = 1, 0
	var joined []engine.ValueType
	for _, c := range cases {
		if c.Type == nil {
			continue
		}
		caseAlign = max(caseAlign, c.Type.align)
		caseSize = max(caseSize, c.Type.size)
		for i, ft := range c.Type.flat {
			if i < len(joined) {
				joined[i] = join(joined[i], ft)
			} else {
				joined = append(joined, ft)
			}
		}
	}
	t.align = max(t.discSize, caseAlign)
	t.payloadOff = alignTo(t.discSize, caseAlign)
	t.size = alignTo(t.payloadOff+caseSize, t.align)
	t.flat = append([]engine.ValueType{engine.I32}, joined...)
	return t
}

// join is the Canonical ABI's join of two flat slot types.
func join(a, b engine.ValueType) engine.ValueType {
	if a == b {
		return a
	}
	if (a == engine.I32 && b == engine.F32) || (a == engine.F32 && b == engine.I32) {
		return engine.I32
	}
	return engine.I64
}

func alignTo(off, align uint32) uint32 { return (off + align - 1) / align * align }

// Kind returns the type constructor.
func (t *Type) Kind() Kind { return t.kind }

// Size is elem_size(t) in wasm32.
func (t *Type) Size() uint32 { return t.size }

// Align is alignment(t) in wasm32.
func (t *Type) Align() uint32 { return t.align }

// Flat is flatten_type(t). The slice must not be modified.
func (t *Type) Flat() []engine.ValueType { return t.flat }

// Offsets returns a record's field offsets (nil for other kinds).
func (t *Type) Offsets() []uint32 { return t.offsets }

// PayloadOffset returns a variant's payload offset.
func (t *Type) PayloadOffset() uint32 { return t.payloadOff }

// String renders the type in WIT syntax (named types by name).
func (t *Type) String() string {
	switch t.kind {
	case KBool:
		return "bool"
	case KU8:
		return "u8"
	case KU16:
		return "u16"
	case KU32:
		return "u32"
	case KU64:
		return "u64"
	case KS8:
		return "s8"
	case KS16:
		return "s16"
	case KS32:
		return "s32"
	case KS64:
		return "s64"
	case KF32:
		return "f32"
	case KF64:
		return "f64"
	case KChar:
		return "char"
	case KString:
		return "string"
	case KList:
		return "list<" + t.elem.String() + ">"
	case KOwn:
		return t.name
	case KBorrow:
		return "borrow<" + t.name + ">"
	case KOption:
		return "option<" + t.cases[1].Type.String() + ">"
	case KResult:
		ok, er := "_", "_"
		if t.cases[0].Type != nil {
			ok = t.cases[0].Type.String()
		}
		if t.cases[1].Type != nil {
			er = t.cases[1].Type.String()
		}
		if ok == "_" && er == "_" {
			return "result"
		}
		return "result<" + ok + ", " + er + ">"
	}
	if t.name != "" {
		return t.name
	}
	if t.kind == KRecord {
		parts := make([]string, len(t.fields))
		for i, f := range t.fields {
			parts[i] = f.Type.String()
		}
		return "tuple<" + strings.Join(parts, ", ") + ">"
	}
	return fmt.Sprintf("kind(%d)", t.kind)
}

// FlatString renders a core type list as WAT, e.g. "i32 i64".
func FlatString(vs []engine.ValueType) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
	}
	return strings.Join(parts, " ")
}

// Cases returns a variant's, option's, result's or enum's cases.
func (t *Type) Cases() []Case { return t.cases }

// Fields returns a record's fields.
func (t *Type) Fields() []Field { return t.fields }

// Elem returns a list's element type.
func (t *Type) Elem() *Type { return t.elem }

// Name returns a record's, variant's or enum's WIT name, or the resource
// of own/borrow ("" for anonymous types).
func (t *Type) Name() string { return t.name }

package component

import (
	"strconv"
	"strings"
)

// The component-level types the parser keeps, so that a component's
// imports can be checked against the host's WIT at the WIT level
// (record fields, variant cases, enum labels, parameter names), not only
// by their flattened core signatures. Types only point at earlier
// entries of an index space, so they form a DAG; a hostile binary can
// make it exponentially wide when unfolded, which is why nothing here
// walks a type without a bound (the check walks in step with the host's
// finite types; Describe stops at a budget).

// TypeKind is a component-level type constructor.
type TypeKind byte

const (
	// TUnknown is a type the parser does not follow (an export of an
	// instance whose type it does not know).
	TUnknown TypeKind = iota
	TPrim
	TRecord
	TVariant
	TList
	TTuple
	TFlags
	TEnum
	TOption
	TResult
	TOwn
	TBorrow
	TFunc
	TInstance
	TComponent
	TResource
)

// Type is one entry of a type index space.
type Type struct {
	Kind TypeKind
	// Prim is the primitive's type code (TPrim): bool 0x7f … string 0x73.
	Prim byte
	// Fields are a record's fields, a variant's cases (Type nil: no
	// payload), or a function's parameters.
	Fields []NamedType
	// Labels are a flags' or an enum's labels.
	Labels []string
	// Elem is a list's or option's element, or own/borrow's resource.
	Elem *Type
	// Items are a tuple's types.
	Items []*Type
	// Ok and Err are a result's types (nil: none); a function's result is
	// Ok (nil: none). NamedResults is a pre-0.2 function's result list.
	Ok, Err      *Type
	NamedResults []NamedType
	// Exports are an instance type's exports, in order.
	Exports []TypeExport
	// Name is the name a type was first exported under (a resource's
	// identity here; for other types only a name for messages).
	Name string
}

// NamedType is a record field, variant case or function parameter.
type NamedType struct {
	Name string
	Type *Type
}

// TypeExport is one export of an instance type.
type TypeExport struct {
	Name string
	Sort Sort
	Type *Type
}

var (
	unknownType = &Type{Kind: TUnknown}
	primTypes   [0x80]*Type
)

func init() {
	for c := 0x73; c <= 0x7f; c++ {
		primTypes[c] = &Type{Kind: TPrim, Prim: byte(c)}
	}
}

var primNames = map[byte]string{0x7f: "bool", 0x7e: "s8", 0x7d: "u8", 0x7c: "s16", 0x7b: "u16", 0x7a: "s32",
	0x79: "u32", 0x78: "s64", 0x77: "u64", 0x76: "f32", 0x75: "f64", 0x74: "char", 0x73: "string"}

// Export is the instance type's export called name, or nil.
func (t *Type) Export(name string) *TypeExport {
	if t == nil {
		return nil
	}
	for i := range t.Exports {
		if t.Exports[i].Name == name {
			return &t.Exports[i]
		}
	}
	return nil
}

// describeBudget bounds how much of a type a message spells out.
const describeBudget = 40

// Describe renders t in WIT-like syntax, at most describeBudget
// constructors deep and wide ("…" past that).
func (t *Type) Describe() string {
	var b strings.Builder
	n := describeBudget
	t.describe(&b, &n)
	return b.String()
}

func (t *Type) describe(b *strings.Builder, n *int) {
	if *n <= 0 {
		b.WriteString("…")
		return
	}
	*n--
	if t == nil {
		b.WriteString("_")
		return
	}
	switch t.Kind {
	case TPrim:
		b.WriteString(primNames[t.Prim])
	case TRecord:
		b.WriteString("record {")
		describeNamed(b, n, t.Fields, ": ")
		b.WriteString("}")
	case TVariant:
		b.WriteString("variant {")
		describeNamed(b, n, t.Fields, "(")
		b.WriteString("}")
	case TList, TOption, TOwn, TBorrow:
		b.WriteString(map[TypeKind]string{TList: "list<", TOption: "option<", TOwn: "own<", TBorrow: "borrow<"}[t.Kind])
		t.Elem.describe(b, n)
		b.WriteString(">")
	case TTuple:
		b.WriteString("tuple<")
		for i, it := range t.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			it.describe(b, n)
		}
		b.WriteString(">")
	case TFlags, TEnum:
		b.WriteString(map[TypeKind]string{TFlags: "flags {", TEnum: "enum {"}[t.Kind] + strings.Join(t.Labels, ", ") + "}")
	case TResult:
		b.WriteString("result<")
		t.Ok.describe(b, n)
		b.WriteString(", ")
		t.Err.describe(b, n)
		b.WriteString(">")
	case TFunc:
		b.WriteString("func(")
		describeNamed(b, n, t.Fields, ": ")
		b.WriteString(")")
		if t.Ok != nil {
			b.WriteString(" -> ")
			t.Ok.describe(b, n)
		}
	case TResource:
		b.WriteString("resource " + t.Name)
	default:
		b.WriteString(map[TypeKind]string{TInstance: "instance", TComponent: "component"}[t.Kind] + "type")
	}
}

// describeNamed writes "name: T, …" (sep ": ") or "name(T), …" (sep "(").
func describeNamed(b *strings.Builder, n *int, fs []NamedType, sep string) {
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		if *n <= 0 {
			b.WriteString("… " + strconv.Itoa(len(fs)-i) + " more")
			return
		}
		b.WriteString(f.Name)
		if f.Type == nil {
			continue
		}
		b.WriteString(sep)
		f.Type.describe(b, n)
		if sep == "(" {
			b.WriteString(")")
		}
	}
}

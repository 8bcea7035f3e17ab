package component

import (
	"fmt"
	"slices"
	"strings"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
)

// WIT is the host's WIT function types per served interface module
// ("capsule:process/host@1.1.0" → its functions, methods named
// "[method]r.f"). An interface without an entry (WASI 0.2, whose host
// descriptors abbreviate flags and tuples) is checked at the core level
// only, when the component is linked.
type WIT map[string][]*cabi.Func

// WITMismatch: a component imports an interface the host serves, but one
// of the functions its import type declares differs from the host's WIT.
// It names the interface, the function, where in the function's type the
// two differ, and what each side has there. errors.Is(err, ErrMismatch).
type WITMismatch struct {
	Interface string // as the component imports it
	Served    string // the host's version it resolved to
	Func      string
	Offset    int // of the import
	// Path is where in the function type ("param options > record
	// persist-options field 1"); "" for the function type as a whole.
	Path            string
	Host, Component string
}

func (e *WITMismatch) Error() string {
	at := e.Path
	if at == "" {
		at = "its type"
	}
	return fmt.Sprintf("%v: import %q (offset %#x) function %q: %s is %s in the host's WIT (%s), %s in the component",
		ErrMismatch, e.Interface, e.Offset, e.Func, at, e.Host, e.Served, e.Component)
}

func (e *WITMismatch) Unwrap() error { return ErrMismatch }

// CheckWIT checks c's imports against the host's WIT without an engine:
// each imported interface must resolve to one of served (module names,
// semver-compatible), and each function its import type declares must
// have the type wit gives it. Compile runs the same check first.
func CheckWIT(c *Component, served []string, wit WIT) error {
	return checkWIT(c, servedNames(served), wit)
}

func servedNames(served []string) *servedSet {
	s := &servedSet{modules: map[string]bool{}}
	for _, m := range served {
		s.modules[m] = true
	}
	return s
}

// Resolve is the module of served that an import of interface name is
// linked to (the same name, or a semver-compatible version), or the
// *Error (ErrUnsupported) load would give, at offset (the import's).
func Resolve(name string, offset int, served []string) (string, error) {
	return servedNames(served).resolve(name, offset)
}

// diff is the first difference found: where, and each side.
type diff struct{ path, host, comp string }

// checkWIT compares every function each imported instance type declares
// with the host's WIT for the interface it resolves to. A function the
// host does not serve is ErrUnsupported; a different type a *WITMismatch.
func checkWIT(c *Component, served *servedSet, wit WIT) error {
	for i := range c.Imports {
		im := &c.Imports[i]
		if im.Sort != SortInstance {
			continue
		}
		mod, err := served.resolve(im.Name, im.Offset)
		if err != nil {
			return err
		}
		funcs, ok := wit[mod]
		if !ok {
			continue
		}
		it := unknownType
		if int(im.Type) < len(c.TypeSpace) {
			it = c.TypeSpace[im.Type]
		}
		if it.Kind != TInstance {
			return &Error{Section: "import", Offset: im.Offset, Reason: fmt.Sprintf("import %q: type %d is not an instance type", im.Name, im.Type), kind: ErrMalformed}
		}
		if err := checkInstance(im, mod, it, funcs); err != nil {
			return err
		}
	}
	return nil
}

// VersionMismatch: a core module imports a function of one version of an
// interface (Module) and the component lowers the same function of
// another version (Lowered) into it, with a different type: the guest
// would read and write the other version's layouts. It names where the
// two types first differ and each side there. errors.Is(err, ErrMismatch).
type VersionMismatch struct {
	Module, Lowered string
	Func            string
	Offset          int // of the core instantiation
	Path            string
	Want, Got       string // at Path: in Module's WIT, in Lowered's
}

func (e *VersionMismatch) Error() string {
	at := e.Path
	if at == "" {
		at = "its type"
	}
	return fmt.Sprintf("%v: a core module (instantiated at offset %#x) imports %q function %q, but the component lowers %q's into it, "+
		"and %s differs: %s in %s, %s in %s (a componentizer that merges imports of semver-compatible versions, "+
		"as wit-component does by default, wrapped a module built against both versions for a world importing one: "+
		"build the module against one version of the interface)",
		ErrMismatch, e.Offset, e.Module, e.Func, e.Lowered, at, e.Want, e.Module, e.Got, e.Lowered)
}

func (e *VersionMismatch) Unwrap() error { return ErrMismatch }

func witFunc(funcs []*cabi.Func, name string) *cabi.Func {
	for _, f := range funcs {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// funcTypeOf and typeOf describe a host WIT type as a component type, so
// that two of the host's versions compare with diffFunc.
func funcTypeOf(f *cabi.Func) *Type {
	return &Type{Kind: TFunc, Fields: namedOf(f.Params), Ok: typeOf(f.Result)}
}

func typeOf(h *cabi.Type) *Type {
	if h == nil {
		return nil
	}
	if code, ok := primCodes[h.Kind()]; ok {
		return &Type{Kind: TPrim, Prim: code}
	}
	t := &Type{Kind: kindOf[h.Kind()], Name: h.Name()}
	switch h.Kind() {
	case cabi.KList:
		t.Elem = typeOf(h.Elem())
	case cabi.KOption:
		t.Elem = typeOf(h.Cases()[1].Type)
	case cabi.KResult:
		t.Ok, t.Err = typeOf(h.Cases()[0].Type), typeOf(h.Cases()[1].Type)
	case cabi.KRecord:
		t.Fields = namedOf(h.Fields())
	case cabi.KVariant:
		for _, c := range h.Cases() {
			t.Fields = append(t.Fields, NamedType{Name: c.Name, Type: typeOf(c.Type)})
		}
	case cabi.KEnum:
		for _, c := range h.Cases() {
			t.Labels = append(t.Labels, c.Name)
		}
	case cabi.KOwn, cabi.KBorrow:
		t.Elem = &Type{Kind: TResource, Name: h.Name()}
	}
	return t
}

func namedOf(fs []cabi.Field) []NamedType {
	out := make([]NamedType, len(fs))
	for i, f := range fs {
		out[i] = NamedType{Name: f.Name, Type: typeOf(f.Type)}
	}
	return out
}

func checkInstance(im *Extern, mod string, it *Type, funcs []*cabi.Func) error {
	for _, ex := range it.Exports {
		if ex.Sort != SortFunc {
			continue
		}
		f := witFunc(funcs, ex.Name)
		if f == nil {
			return &Error{Section: "import", Offset: im.Offset, Construct: fmt.Sprintf("import %q function %q", im.Name, ex.Name),
				Reason: "the host serves no such function in " + mod, Hint: "build the capsule against the WIT this host serves (capsule-host wit --out DIR)", kind: ErrUnsupported}
		}
		if d := diffFunc(f, ex.Type); d != nil {
			return &WITMismatch{Interface: im.Name, Served: mod, Func: ex.Name, Offset: im.Offset, Path: d.path, Host: d.host, Component: d.comp}
		}
	}
	return nil
}

func diffFunc(h *cabi.Func, t *Type) *diff {
	if t.Kind != TFunc {
		return &diff{"", "a function", t.Describe()}
	}
	if len(h.Params) != len(t.Fields) {
		return &diff{"the parameter list", fmt.Sprintf("%d parameters (%s)", len(h.Params), fieldNames(h.Params)),
			fmt.Sprintf("%d parameters (%s)", len(t.Fields), namedNames(t.Fields))}
	}
	for i, p := range h.Params {
		if p.Name != t.Fields[i].Name {
			return &diff{fmt.Sprintf("parameter %d's name", i), p.Name, t.Fields[i].Name}
		}
		if d := diffType("param "+p.Name, p.Type, t.Fields[i].Type); d != nil {
			return d
		}
	}
	if len(t.NamedResults) > 0 {
		return &diff{"the result", resultText(h.Result), fmt.Sprintf("%d named results", len(t.NamedResults))}
	}
	return diffType("the result", h.Result, t.Ok)
}

func resultText(t *cabi.Type) string {
	if t == nil {
		return "none"
	}
	return t.String()
}

var primCodes = map[cabi.Kind]byte{cabi.KBool: 0x7f, cabi.KS8: 0x7e, cabi.KU8: 0x7d, cabi.KS16: 0x7c, cabi.KU16: 0x7b,
	cabi.KS32: 0x7a, cabi.KU32: 0x79, cabi.KS64: 0x78, cabi.KU64: 0x77, cabi.KF32: 0x76, cabi.KF64: 0x75,
	cabi.KChar: 0x74, cabi.KString: 0x73}

var kindOf = map[cabi.Kind]TypeKind{cabi.KList: TList, cabi.KRecord: TRecord, cabi.KVariant: TVariant,
	cabi.KEnum: TEnum, cabi.KOption: TOption, cabi.KResult: TResult, cabi.KOwn: TOwn, cabi.KBorrow: TBorrow}

// diffType walks h and t in step; the walk is bounded by h, the host's
// finite type, however t is shared.
func diffType(path string, h *cabi.Type, t *Type) *diff {
	if t == nil || h == nil {
		if h == nil && t == nil {
			return nil
		}
		comp := "none"
		if t != nil {
			comp = t.Describe()
		}
		return &diff{path, resultText(h), comp}
	}
	if code, ok := primCodes[h.Kind()]; ok {
		if t.Kind != TPrim || t.Prim != code {
			return &diff{path, h.String(), t.Describe()}
		}
		return nil
	}
	if kindOf[h.Kind()] != t.Kind {
		return &diff{path, h.String(), t.Describe()}
	}
	switch h.Kind() {
	case cabi.KList:
		return diffType(path+" > list element", h.Elem(), t.Elem)
	case cabi.KOption:
		return diffType(path+" > option", h.Cases()[1].Type, t.Elem)
	case cabi.KResult:
		if d := diffType(path+" > result ok", h.Cases()[0].Type, t.Ok); d != nil {
			return d
		}
		return diffType(path+" > result error", h.Cases()[1].Type, t.Err)
	case cabi.KRecord:
		return diffFields(path, "record "+h.Name(), "field", h.Fields(), t.Fields)
	case cabi.KVariant:
		cs := make([]cabi.Field, len(h.Cases()))
		for i, c := range h.Cases() {
			cs[i] = cabi.Field{Name: c.Name, Type: c.Type}
		}
		return diffFields(path, "variant "+h.Name(), "case", cs, t.Fields)
	case cabi.KEnum:
		var labels []string
		for _, c := range h.Cases() {
			labels = append(labels, c.Name)
		}
		if !slices.Equal(labels, t.Labels) {
			return &diff{path + " > enum " + h.Name(), "{" + strings.Join(labels, ", ") + "}", "{" + strings.Join(t.Labels, ", ") + "}"}
		}
	case cabi.KOwn, cabi.KBorrow:
		if t.Elem == nil || t.Elem.Kind != TResource || t.Elem.Name != h.Name() {
			return &diff{path, h.String(), t.Describe() + " (resource " + t.Elem.Describe() + ")"}
		}
	}
	return nil
}

// diffFields compares a record's fields or a variant's cases (a nil
// type: a case without payload), names in order, then types.
func diffFields(path, what, item string, hs []cabi.Field, ts []NamedType) *diff {
	path += " > " + what
	if len(hs) != len(ts) {
		return &diff{path, fmt.Sprintf("%d %ss (%s)", len(hs), item, fieldNames(hs)), fmt.Sprintf("%d %ss (%s)", len(ts), item, namedNames(ts))}
	}
	for i, f := range hs {
		if f.Name != ts[i].Name {
			return &diff{fmt.Sprintf("%s %s %d's name", path, item, i), f.Name, ts[i].Name}
		}
		if d := diffType(path+" "+item+" "+f.Name, f.Type, ts[i].Type); d != nil {
			return d
		}
	}
	return nil
}

func fieldNames(fs []cabi.Field) string {
	ns := make([]string, len(fs))
	for i, f := range fs {
		ns[i] = f.Name
	}
	return strings.Join(ns, ", ")
}

func namedNames(fs []NamedType) string {
	ns := make([]string, len(fs))
	for i, f := range fs {
		ns[i] = f.Name
	}
	return strings.Join(ns, ", ")
}

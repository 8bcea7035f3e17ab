package witsrc

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/capsule-host/capsule-host/host/engine"
	"go.bytecodealliance.org/wit"
)

// Load assembles the repository's wit/ (see Assemble) in a temporary
// directory and resolves it with go.bytecodealliance.org/wit, which runs an
// embedded wasm-tools under wazero: no external binary is needed.
func Load(modRoot string) (*wit.Resolve, error) {
	witDir, err := WITDir(modRoot)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "abi-tests-wit-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := Assemble(witDir, tmp); err != nil {
		return nil, err
	}
	res, err := wit.LoadWIT(tmp)
	if err != nil {
		return nil, fmt.Errorf("witsrc: resolve %s: %w", witDir, err)
	}
	return res, nil
}

// CoreFunc is one core wasm function of the Canonical ABI's legacy
// core-module mangling: an import (Module, Name) or an export (Name only).
type CoreFunc struct {
	Module, Name    string
	Params, Results []engine.ValueType
}

// Key is "module name" for imports and "name" for exports.
func (f CoreFunc) Key() string {
	if f.Module == "" {
		return f.Name
	}
	return f.Module + " " + f.Name
}

// Sig renders the core signature as "(i32, i64) -> (i32)".
func (f CoreFunc) Sig() string { return Sig(f.Params, f.Results) }

// Sig renders a core signature.
func Sig(params, results []engine.ValueType) string {
	s := func(ts []engine.ValueType) string {
		parts := make([]string, len(ts))
		for i, t := range ts {
			parts[i] = t.String()
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}
	return s(params) + " -> " + s(results)
}

// coreType maps one flattened WIT type (what wit.Type.Flat yields: u32, u64,
// f32, f64 or a pointer) to its core wasm value type.
func coreType(t wit.Type) (engine.ValueType, error) {
	switch t.(type) {
	case wit.U64, wit.S64:
		return engine.I64, nil
	case wit.F32:
		return engine.F32, nil
	case wit.F64:
		return engine.F64, nil
	case wit.Bool, wit.U8, wit.S8, wit.U16, wit.S16, wit.U32, wit.S32, wit.Char:
		return engine.I32, nil
	case *wit.TypeDef:
		if _, ok := t.(*wit.TypeDef).Kind.(*wit.Pointer); ok {
			return engine.I32, nil
		}
	}
	return 0, fmt.Errorf("witsrc: %T is not a flat core type", t)
}

func coreFunc(module, name string, f *wit.Function, dir wit.Direction) (CoreFunc, error) {
	cf := f.CoreFunction(dir)
	out := CoreFunc{Module: module, Name: name}
	for _, p := range cf.Params {
		vt, err := coreType(p.Type)
		if err != nil {
			return out, fmt.Errorf("%s %s param %s: %w", module, name, p.Name, err)
		}
		out.Params = append(out.Params, vt)
	}
	for _, r := range cf.Results {
		vt, err := coreType(r.Type)
		if err != nil {
			return out, fmt.Errorf("%s %s result: %w", module, name, err)
		}
		out.Results = append(out.Results, vt)
	}
	return out, nil
}

// InterfaceID returns the core-module name of an interface, for example
// "capsule:process/host@1.1.0".
func InterfaceID(i *wit.Interface) string {
	id := i.Package.Name
	if i.Name != nil {
		id.Extension = *i.Name
	}
	return id.String()
}

// Interfaces returns the resolved interfaces of the packages whose
// unversioned name is pkg (e.g. "capsule:process"), sorted by ID.
func Interfaces(res *wit.Resolve, pkg string) []*wit.Interface {
	var out []*wit.Interface
	for _, i := range res.Interfaces {
		if i.Package == nil || i.Name == nil {
			continue
		}
		if i.Package.Name.UnversionedString() == pkg {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(a, b int) bool { return InterfaceID(out[a]) < InterfaceID(out[b]) })
	return out
}

// Imports derives every core import a guest may make of interface i, as
// wit-bindgen lowers it: each function under its WIT name ([method]r.m,
// [static]r.f, [constructor]r, plain names) and [resource-drop]r for each
// resource, with the flattened signature of wit.Function.CoreFunction
// (more than 16 flat params: one pointer; more than one flat result: a
// return pointer appended to the params).
func Imports(i *wit.Interface) ([]CoreFunc, error) {
	module := InterfaceID(i)
	var out []CoreFunc
	var err error
	i.TypeDefs.All()(func(_ string, td *wit.TypeDef) bool {
		if _, ok := td.Kind.(*wit.Resource); !ok {
			return true
		}
		drop := td.ResourceDrop()
		var cf CoreFunc
		if cf, err = coreFunc(module, drop.Name, drop, wit.Imported); err != nil {
			return false
		}
		out = append(out, cf)
		return true
	})
	if err != nil {
		return nil, err
	}
	for f := range i.AllFunctions() {
		cf, err := coreFunc(module, f.Name, f, wit.Imported)
		if err != nil {
			return nil, err
		}
		out = append(out, cf)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// Exports derives the core exports of interface i as a guest exports it:
// "<interface-id>#<func>" with the lifted signature (more than one flat
// result: a single returned pointer).
func Exports(i *wit.Interface) ([]CoreFunc, error) {
	id := InterfaceID(i)
	var out []CoreFunc
	for f := range i.AllFunctions() {
		cf, err := coreFunc("", id+"#"+f.Name, f, wit.Exported)
		if err != nil {
			return nil, err
		}
		out = append(out, cf)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// PostReturns derives the optional cabi_post_<export> functions of
// interface i: (i32) -> () for every export that returns through a pointer.
func PostReturns(i *wit.Interface) []CoreFunc {
	id := InterfaceID(i)
	var out []CoreFunc
	for f := range i.AllFunctions() {
		if f.PostReturn(wit.Exported) != nil {
			out = append(out, CoreFunc{Name: "cabi_post_" + id + "#" + f.Name, Params: []engine.ValueType{engine.I32}})
		}
	}
	return out
}

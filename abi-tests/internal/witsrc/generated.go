package witsrc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/capsule-host/capsule-host/host/engine"
)

// GeneratedFuncs reads the //go:wasmimport and //go:wasmexport declarations
// that wit-bindgen-go wrote under dir (its *.wasm.go files) and returns them
// as core functions: the third-party generator's view of the module names,
// field names and flattened core signatures.
//
// Go parameter types map to core types as the Go compiler lowers them for
// wasm: 32-bit integers, bool and pointers to i32; 64-bit integers to i64.
func GeneratedFuncs(dir string) (imports, exports []CoreFunc, err error) {
	fset := token.NewFileSet()
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".wasm.go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Doc == nil {
				continue
			}
			for _, c := range fd.Doc.List {
				var cf CoreFunc
				switch {
				case strings.HasPrefix(c.Text, "//go:wasmimport "):
					fields := strings.Fields(strings.TrimPrefix(c.Text, "//go:wasmimport "))
					if len(fields) != 2 {
						return fmt.Errorf("%s: malformed %q", fset.Position(c.Pos()), c.Text)
					}
					cf.Module, cf.Name = fields[0], fields[1]
				case strings.HasPrefix(c.Text, "//go:wasmexport "):
					cf.Name = strings.TrimSpace(strings.TrimPrefix(c.Text, "//go:wasmexport "))
				default:
					continue
				}
				if cf.Params, err = goCoreTypes(fd.Type.Params); err != nil {
					return fmt.Errorf("%s: %s: %w", fset.Position(fd.Pos()), fd.Name.Name, err)
				}
				if cf.Results, err = goCoreTypes(fd.Type.Results); err != nil {
					return fmt.Errorf("%s: %s: %w", fset.Position(fd.Pos()), fd.Name.Name, err)
				}
				if cf.Module != "" {
					imports = append(imports, cf)
				} else {
					exports = append(exports, cf)
				}
			}
		}
		return nil
	})
	return imports, exports, err
}

func goCoreTypes(fl *ast.FieldList) ([]engine.ValueType, error) {
	if fl == nil {
		return nil, nil
	}
	var out []engine.ValueType
	for _, f := range fl.List {
		var vt engine.ValueType
		switch t := f.Type.(type) {
		case *ast.StarExpr:
			vt = engine.I32
		case *ast.SelectorExpr:
			if t.Sel.Name != "Pointer" {
				return nil, fmt.Errorf("unsupported type %s", t.Sel.Name)
			}
			vt = engine.I32
		case *ast.Ident:
			switch t.Name {
			case "uint32", "int32", "bool", "uintptr":
				vt = engine.I32
			case "uint64", "int64":
				vt = engine.I64
			case "float32":
				vt = engine.F32
			case "float64":
				vt = engine.F64
			default:
				return nil, fmt.Errorf("unsupported type %s", t.Name)
			}
		default:
			return nil, fmt.Errorf("unsupported type %T", f.Type)
		}
		n := len(f.Names)
		if n == 0 {
			n = 1
		}
		for range n {
			out = append(out, vt)
		}
	}
	return out, nil
}

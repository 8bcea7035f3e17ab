// Command funclen reports Go functions longer than a limit, so that
// `make test` keeps ARCHITECTURE.md's rule: no production function over
// about 80 lines unless a comment beside it says why (a line in its doc
// comment starting with "funclen:").
//
//	go run ./internal/funclen [-max 80] [-all] DIR...
//
// With -all it prints every package's line count and longest function,
// the figures the renovation note quotes; without it, it prints only the
// offenders and exits 1 if there are any. Test files and generated code
// are skipped.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type fn struct {
	pos   string
	name  string
	lines int
	why   bool
}

type pkg struct {
	lines   int
	longest fn
}

func main() {
	max := flag.Int("max", 80, "longest allowed function body, in lines")
	all := flag.Bool("all", false, "print per-package lines and longest function")
	flag.Parse()
	pkgs := map[string]*pkg{}
	var offenders []fn
	fset := token.NewFileSet()
	for _, root := range flag.Args() {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if n := d.Name(); n == "testdata" || n == "node_modules" || (strings.HasPrefix(n, ".") && n != ".") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			if ast.IsGenerated(f) {
				return nil
			}
			dir := filepath.Dir(path)
			p := pkgs[dir]
			if p == nil {
				p = &pkg{}
				pkgs[dir] = p
			}
			p.lines += fset.Position(f.End()).Line
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					name = recvName(fd.Recv.List[0].Type) + "." + name
				}
				f := fn{pos: fmt.Sprintf("%s:%d", path, fset.Position(fd.Pos()).Line), name: name, lines: n, why: hasWhy(fd.Doc)}
				if n > p.longest.lines {
					p.longest = f
				}
				if n > *max && !f.why {
					offenders = append(offenders, f)
				}
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "funclen:", err)
			os.Exit(2)
		}
	}
	if *all {
		dirs := make([]string, 0, len(pkgs))
		for d := range pkgs {
			dirs = append(dirs, d)
		}
		sort.Strings(dirs)
		for _, d := range dirs {
			p := pkgs[d]
			fmt.Printf("%-45s %6d lines  longest %-32s %4d\n", d, p.lines, p.longest.name, p.longest.lines)
		}
		return
	}
	sort.Slice(offenders, func(i, j int) bool { return offenders[i].lines > offenders[j].lines })
	for _, f := range offenders {
		fmt.Printf("%s: %s is %d lines (limit %d; say why in a \"funclen:\" doc line, or split it)\n", f.pos, f.name, f.lines, *max)
	}
	if len(offenders) > 0 {
		os.Exit(1)
	}
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

func hasWhy(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, c := range doc.List {
		if strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(c.Text, "//")), "funclen:") {
			return true
		}
	}
	return false
}

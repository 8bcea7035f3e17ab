// Package wit embeds the WIT contract so the binary can print it
// (`capsule-host wit`) and report the versions it serves without the
// source tree at hand.
package wit

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FS holds every released package version, one folder each
// (e.g. "process@1.1.0/host.wit").
//
//go:embed */*.wit
var FS embed.FS

// Package is one released package version of the contract.
type Package struct {
	Name    string // e.g. "capsule:process"
	Version string // e.g. "1.1.0"
	Dir     string // folder in FS, e.g. "process@1.1.0"
	Files   []string
}

// ID is "capsule:process@1.1.0".
func (p Package) ID() string { return p.Name + "@" + p.Version }

// Packages lists the embedded package versions, sorted by name then version.
func Packages() []Package {
	ents, _ := fs.ReadDir(FS, ".")
	var out []Package
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		name, ver, ok := strings.Cut(e.Name(), "@")
		if !ok {
			continue
		}
		p := Package{Name: "capsule:" + name, Version: ver, Dir: e.Name()}
		files, _ := fs.ReadDir(FS, e.Name())
		for _, f := range files {
			if strings.HasSuffix(f.Name(), ".wit") {
				p.Files = append(p.Files, e.Name()+"/"+f.Name())
			}
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out
}

// Find returns the packages matching sel: "" (all), a version ("1.1.0",
// "1.1"), a package ("process", "capsule:process") or both
// ("process@1.0.0", "capsule:process@1.0").
func Find(sel string) ([]Package, error) {
	all := Packages()
	if sel == "" {
		return all, nil
	}
	name, ver, hasVer := strings.Cut(sel, "@")
	if !hasVer && len(name) > 0 && name[0] >= '0' && name[0] <= '9' {
		name, ver = "", name
	}
	if name != "" && !strings.Contains(name, ":") {
		name = "capsule:" + name
	}
	var out []Package
	for _, p := range all {
		if name != "" && p.Name != name {
			continue
		}
		if ver != "" && p.Version != ver && !strings.HasPrefix(p.Version, ver+".") {
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		var ids []string
		for _, p := range all {
			ids = append(ids, p.ID())
		}
		return nil, fmt.Errorf("no contract version matches %q (served: %s)", sel, strings.Join(ids, ", "))
	}
	return out, nil
}

// WriteDir writes the whole contract to dir in the layout wit-parser
// (wit-bindgen, jco, componentize-js) reads as a package with its
// dependencies: capsule:guest, which holds the worlds, at the top, and
// every capsule:process version under deps/<name@version>/. The worlds
// import every version, so a partial set would not resolve. Existing
// files of the same names are replaced; it returns the paths written,
// relative to dir.
func WriteDir(dir string) ([]string, error) {
	var written []string
	for _, p := range Packages() {
		sub := filepath.Join("deps", p.Dir)
		if p.Name == "capsule:guest" {
			sub = "."
		}
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return written, err
		}
		for _, f := range p.Files {
			b, err := fs.ReadFile(FS, f)
			if err != nil {
				return written, err
			}
			rel := filepath.Join(sub, filepath.Base(f))
			if err := os.WriteFile(filepath.Join(dir, rel), b, 0o644); err != nil {
				return written, err
			}
			written = append(written, rel)
		}
	}
	return written, nil
}

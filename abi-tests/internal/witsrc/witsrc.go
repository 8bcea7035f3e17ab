// Package witsrc locates the repository's frozen WIT contract and lays it out
// the way wasm-tools resolves packages: one root package plus a deps/ folder.
//
// Why: wit/ keeps each released package version in its own folder
// (process@1.0.0, process@1.1.0, guest@1.0.0) and guest@1.0.0's worlds import
// the process packages. wasm-tools (and so go.bytecodealliance.org/wit and
// wit-bindgen-go) resolve a directory as "root package + deps/". We build
// that layout in a temporary directory instead of adding files under wit/,
// which is frozen.
package witsrc

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// RootPackage is the folder of wit/ used as the root of the assembled tree;
// every other folder becomes a dependency.
const RootPackage = "guest@1.0.0"

// WITDir returns the repository's wit/ directory, found by walking up from
// dir to the directory holding the core module's go.mod.
func WITDir(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		gm, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(gm), "module github.com/capsule-host/capsule-host\n") {
			w := filepath.Join(d, "wit")
			if st, err := os.Stat(w); err == nil && st.IsDir() {
				return w, nil
			}
			return "", fmt.Errorf("witsrc: %s has the core go.mod but no wit/ directory", d)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("witsrc: no core module (github.com/capsule-host/capsule-host) above %s", dir)
		}
		d = parent
	}
}

// Files returns every .wit file under witDir as paths relative to witDir
// (slash-separated, sorted), e.g. "process@1.1.0/host.wit".
func Files(witDir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(witDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".wit") {
			rel, err := filepath.Rel(witDir, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// Assemble copies witDir into dst as root package (RootPackage's files in
// dst) plus dst/deps/<folder>/ for every other package folder. dst must be
// empty or missing.
func Assemble(witDir, dst string) error {
	files, err := Files(witDir)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("witsrc: no .wit files under %s", witDir)
	}
	sawRoot := false
	for _, f := range files {
		folder, name, ok := strings.Cut(f, "/")
		if !ok || strings.Contains(name, "/") {
			return fmt.Errorf("witsrc: %s: expected <package@version>/<file>.wit", f)
		}
		target := filepath.Join(dst, "deps", folder, name)
		if folder == RootPackage {
			sawRoot = true
			target = filepath.Join(dst, name)
		}
		b, err := os.ReadFile(filepath.Join(witDir, filepath.FromSlash(f)))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, b, 0o644); err != nil {
			return err
		}
	}
	if !sawRoot {
		return fmt.Errorf("witsrc: %s has no %s folder", witDir, RootPackage)
	}
	return nil
}

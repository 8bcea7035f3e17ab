package contract

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/abi-tests/internal/witsrc"
)

// modRoot is the abi-tests module root (tests run in their package dir).
const modRoot = ".."

// TestBindingsReproducible regenerates the wit-bindgen-go bindings with the
// pinned tool (go tool wit-bindgen-go, v0.7.0 in go.mod) and requires them
// to equal the committed ones, so CI proves the committed code is what the
// third-party generator makes of the frozen WIT.
func TestBindingsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the wit-bindgen-go run (builds the tool on a cold cache, ~20 s)")
	}
	out := t.TempDir()
	if err := witsrc.Generate(modRoot, out); err != nil {
		t.Fatal(err)
	}
	for _, b := range witsrc.Bindings {
		committed := filepath.Join(modRoot, filepath.FromSlash(b.Dir))
		fresh := filepath.Join(out, filepath.FromSlash(b.Dir))
		diffTrees(t, committed, fresh)
	}
}

func diffTrees(t *testing.T, committed, fresh string) {
	t.Helper()
	seen := map[string]bool{}
	filepath.WalkDir(fresh, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(fresh, p)
		seen[rel] = true
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(committed, rel))
		if err != nil {
			t.Errorf("%s: missing from the committed bindings (run go generate ./... in abi-tests)", filepath.Join(committed, rel))
		} else if !bytes.Equal(got, want) {
			t.Errorf("%s differs from a fresh wit-bindgen-go run (run go generate ./... in abi-tests)", filepath.Join(committed, rel))
		}
		return nil
	})
	filepath.WalkDir(committed, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if rel, _ := filepath.Rel(committed, p); !seen[rel] {
			t.Errorf("%s is not produced by wit-bindgen-go any more: remove it", p)
		}
		return nil
	})
}

// TestWitBindgenGoAgreesWithOracle compares the imports and exports that
// wit-bindgen-go declared (//go:wasmimport, //go:wasmexport in the committed
// bindings) with the ones this suite derives from the WIT: module, name and
// flattened core signature must match one for one.
func TestWitBindgenGoAgreesWithOracle(t *testing.T) {
	res, err := witsrc.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]witsrc.CoreFunc{} // world dir -> key -> func
	for _, b := range witsrc.Bindings {
		want[b.Dir] = map[string]witsrc.CoreFunc{}
	}
	for _, iface := range witsrc.Interfaces(res, "capsule:process") {
		fs, err := witsrc.Imports(iface)
		if err != nil {
			t.Fatal(err)
		}
		dir := "testdata/bindings/ephemeral" // world capsule-ephemeral imports 1.0.0
		switch {
		case strings.HasSuffix(witsrc.InterfaceID(iface), "@1.1.0"):
			dir = "testdata/bindings/full" // world capsule imports 1.1.0
		case strings.HasSuffix(witsrc.InterfaceID(iface), "@1.2.0"):
			dir = "testdata/bindings/terminal" // process@1.2.0's world capsule-terminal
		}
		for _, f := range fs {
			want[dir][f.Key()] = f
		}
	}
	tools := witsrc.Interfaces(res, "capsule:guest")
	ex, err := witsrc.Exports(tools[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range witsrc.Bindings {
		for _, e := range ex {
			want[b.Dir][e.Key()] = e
		}
	}
	for _, b := range witsrc.Bindings {
		imps, exps, err := witsrc.GeneratedFuncs(filepath.Join(modRoot, filepath.FromSlash(b.Dir)))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]witsrc.CoreFunc{}
		for _, f := range append(imps, exps...) {
			got[f.Key()] = f
		}
		for k, w := range want[b.Dir] {
			g, ok := got[k]
			switch {
			case !ok:
				t.Errorf("world %s: wit-bindgen-go declares no %s (oracle: %s)", b.World, k, w.Sig())
			case g.Sig() != w.Sig():
				t.Errorf("world %s: %s: wit-bindgen-go %s, oracle %s", b.World, k, g.Sig(), w.Sig())
			}
		}
		for k, g := range got {
			if _, ok := want[b.Dir][k]; !ok {
				t.Errorf("world %s: wit-bindgen-go declares %s %s, which the oracle does not derive", b.World, k, g.Sig())
			}
		}
		t.Logf("world %s: %d imports, %d exports agree", b.World, len(imps), len(exps))
	}
}

// TestWitBindgenGoOutputOnStandardGo records whether wit-bindgen-go
// v0.7.0's output builds for GOOS=wasip1 GOARCH=wasm. It does not: the
// generator targets a 32-bit Go (TinyGo, or the future GOARCH=wasm32,
// golang/go#63131): its wasmimport declarations take pointer types that
// Go's wasm64 port refuses, and its cm types (string, cm.List, pointers)
// have 64-bit layouts on GOARCH=wasm, not the Canonical ABI's 32-bit ones.
// So the end-to-end guest (guest/full, guest/ephemeral) uses hand-written
// bindings whose layouts are checked against the WIT oracle instead.
func TestWitBindgenGoOutputOnStandardGo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cmd := exec.Command("go", "build", "./testdata/bindings/...")
	cmd.Dir = modRoot
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("wit-bindgen-go output now builds for GOOS=wasip1 GOARCH=wasm: check its memory layouts and, if they are 32-bit, run the end-to-end guest on the generated bindings")
		return
	}
	if !strings.Contains(string(out), "unsupported parameter type") && !strings.Contains(string(out), "unsupported result type") {
		t.Fatalf("go build of the generated bindings failed for another reason:\n%s", out)
	}
	t.Skipf("KNOWN GAP: wit-bindgen-go v0.7.0 bindings do not build with standard Go for GOARCH=wasm (they need a 32-bit Go: TinyGo, not installable here, or GOARCH=wasm32, golang/go#63131); the bindings are used as a static oracle only. First error: %s",
		firstLine(string(out)))
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "unsupported") {
			return strings.TrimSpace(l)
		}
	}
	return s
}

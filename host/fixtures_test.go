package host_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The committed .wasm fixtures are what their .wat sources build to
// (wat2wasm from Debian's wabt), so nobody edits one without the other.
func TestWATFixturesUpToDate(t *testing.T) {
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("SKIPPED LOUDLY: wat2wasm (Debian wabt) is not installed; `make deps` installs it")
	}
	var wats []string
	for _, g := range []string{"testdata/*/*.wat", "engine/enginetest/testdata/*.wat"} {
		m, _ := filepath.Glob(g)
		wats = append(wats, m...)
	}
	if len(wats) == 0 {
		t.Fatal("no .wat fixtures found")
	}
	for _, w := range wats {
		out := filepath.Join(t.TempDir(), "x.wasm")
		if b, err := exec.Command("wat2wasm", w, "-o", out).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", w, err, b)
			continue
		}
		got, _ := os.ReadFile(out)
		committed, err := os.ReadFile(w[:len(w)-len(".wat")] + ".wasm")
		if err != nil || !bytes.Equal(got, committed) {
			t.Errorf("%s: the committed .wasm is stale or missing; rebuild with wat2wasm", w)
		}
	}
}

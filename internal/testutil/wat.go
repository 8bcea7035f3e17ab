package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CheckWATFixtures rebuilds every .wat matched by globs with wat2wasm
// (Debian's wabt) and fails for each committed .wasm beside it that is not
// byte-identical, so nobody edits one without the other.
func CheckWATFixtures(t *testing.T, globs ...string) {
	t.Helper()
	bin, err := exec.LookPath("wat2wasm")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: wat2wasm (Debian package wabt) is not installed; the committed .wasm fixtures are not checked against their .wat sources (`make deps` installs it)")
	}
	var wats []string
	for _, g := range globs {
		m, _ := filepath.Glob(g)
		wats = append(wats, m...)
	}
	if len(wats) == 0 {
		t.Fatalf("no .wat fixtures match %v", globs)
	}
	for _, wat := range wats {
		wasm := strings.TrimSuffix(wat, ".wat") + ".wasm"
		out := filepath.Join(t.TempDir(), "out.wasm")
		if b, err := exec.Command(bin, wat, "-o", out).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", wat, err, b)
			continue
		}
		fresh, _ := os.ReadFile(out)
		committed, err := os.ReadFile(wasm)
		if err != nil || !bytes.Equal(fresh, committed) {
			t.Errorf("%s: the committed .wasm is stale or missing (run: wat2wasm %s -o %s)", wat, wat, wasm)
		}
	}
}

package tool_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFixturesUpToDate rebuilds every testdata/*.wat with wat2wasm (wabt)
// and checks that the committed .wasm beside it is byte-identical.
func TestFixturesUpToDate(t *testing.T) {
	bin, err := exec.LookPath("wat2wasm")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: wat2wasm (Debian package wabt) is not installed; the committed .wasm fixtures are not checked against their .wat sources")
	}
	wats, _ := filepath.Glob("testdata/*.wat")
	if len(wats) == 0 {
		t.Fatal("no .wat fixtures")
	}
	for _, wat := range wats {
		out := filepath.Join(t.TempDir(), "out.wasm")
		if b, err := exec.Command(bin, wat, "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", wat, err, b)
		}
		fresh, _ := os.ReadFile(out)
		committed, err := os.ReadFile(strings.TrimSuffix(wat, ".wat") + ".wasm")
		if err != nil || !bytes.Equal(fresh, committed) {
			t.Errorf("%s: committed .wasm differs from a fresh build (run: wat2wasm %s -o %s)", wat, wat, strings.TrimSuffix(wat, ".wat")+".wasm")
		}
	}
}

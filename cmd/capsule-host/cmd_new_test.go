//go:build !leanclient

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the checkout this test runs in (for --sdk).
func repoRoot(t testing.TB) string {
	t.Helper()
	abs, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestNewBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"Bad", "9_", "a_b", strings.Repeat("a", 64), "a.b"} {
		_, errOut, code := runCLI(t, "", "new", name, filepath.Join(dir, "x"), "--sdk", repoRoot(t))
		if code != exitUsage || !strings.Contains(errOut, "invalid capsule name") || !strings.Contains(errOut, "lowercase letters, digits and '-'") {
			t.Fatalf("new %q: exit %d, stderr %q", name, code, errOut)
		}
	}
	existing := filepath.Join(dir, "there")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, "", "new", "there", existing, "--sdk", repoRoot(t)); code != exitFailed || !strings.Contains(errOut, "already exists") {
		t.Fatalf("new into an existing dir: exit %d, stderr %q", code, errOut)
	}
	if ents, _ := os.ReadDir(existing); len(ents) != 0 {
		t.Fatalf("new wrote into an existing dir: %v", ents)
	}
	t.Setenv("CAPSULE_HOST_SDK", "")
	if _, errOut, code := runCLI(t, "", "new", "nosdk", filepath.Join(dir, "nosdk")); code != exitUsage || !strings.Contains(errOut, "--sdk DIR") {
		t.Fatalf("new outside a checkout without --sdk: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "nosdk")); err == nil {
		t.Fatal("a refused new left its directory")
	}
	if _, errOut, code := runCLI(t, "", "new", "badsdk", filepath.Join(dir, "badsdk"), "--sdk", dir); code != exitFailed || !strings.Contains(errOut, "not a capsule-host checkout") {
		t.Fatalf("new --sdk on a non-checkout: exit %d, stderr %q", code, errOut)
	}
}

// Inside the checkout no go.mod is written (the checkout's module builds
// it); the files are the scaffold's, executable build script included.
func TestNewInsideCheckout(t *testing.T) {
	dir, err := os.MkdirTemp(repoRoot(t), ".new-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	out, errOut, code := runCLI(t, "", "new", "inrepo", filepath.Join(dir, "inrepo"))
	if code != exitOK || !strings.Contains(out, "created ") {
		t.Fatalf("new: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, f := range []string{"Capsule.toml", "main.go", "main_test.go", "build.sh"} {
		if _, err := os.Stat(filepath.Join(dir, "inrepo", f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "inrepo", "go.mod")); err == nil {
		t.Fatal("new wrote a go.mod inside the checkout")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "inrepo", "build.sh")); fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("build.sh mode %v", fi.Mode())
	}
	if m, _ := os.ReadFile(filepath.Join(dir, "inrepo", "Capsule.toml")); !strings.Contains(string(m), `name = "inrepo"`) {
		t.Fatalf("manifest:\n%s", m)
	}
}

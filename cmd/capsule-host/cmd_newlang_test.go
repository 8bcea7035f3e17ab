//go:build !leanclient

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNewUnknownLang(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x")
	_, errOut, code := runCLI(t, "", "new", "x", dir, "--lang", "rust", "--sdk", repoRoot(t))
	if code != exitUsage || !strings.Contains(errOut, "unknown --lang") || !strings.Contains(errOut, "go, js") {
		t.Fatalf("new --lang rust: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("a refused new left its directory")
	}
	if err := runNew(&env{}, &opts{lang: "rust"}, []string{"x", dir}); !errors.Is(err, ErrUnknownLang) {
		t.Fatalf("runNew --lang rust: %v, want ErrUnknownLang", err)
	}
}

// TestNewJSBuilds runs the JS author loop from the built binary: new
// --lang js inside the checkout, build.sh (reusing the component tests'
// npm install of host/component/testdata/build, so no second npm ci),
// validate, and the scaffold's own go test calling its tool.
func TestNewJSBuilds(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	if testing.Short() {
		t.Skip("SKIP: -short: the JS scaffold's build runs componentize-js (about a minute)")
	}
	nm := filepath.Join(repoRoot(t), "host", "component", "testdata", "build", "node_modules")
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("SKIP (new --lang js): node is not installed; run `make npm-deps`")
	}
	if _, err := os.Stat(filepath.Join(nm, "@bytecodealliance", "componentize-js", "package.json")); err != nil {
		t.Skip("SKIP (new --lang js): componentize-js is not installed; run `make npm-deps`")
	}
	bin := builtBinary(t)
	dir, err := os.MkdirTemp(repoRoot(t), ".new-js-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	capDir := filepath.Join(dir, "jsgreet")
	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = capDir
		cmd.Env = append(os.Environ(), "CAPSULE_HOST="+bin, "NODE_MODULES="+nm)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, b)
		}
	}
	if out, errOut, code := runCLI(t, "", "new", "jsgreet", capDir, "--lang", "js"); code != exitOK {
		t.Fatalf("new --lang js: exit %d\n%s\n%s", code, out, errOut)
	}
	run("./build.sh")
	run(bin, "validate", ".")
	run("go", "test", "-count=1", ".")
}

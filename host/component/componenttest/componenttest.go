// Package componenttest builds real component binaries for tests: it
// wraps a core capsule into a component with the jco pinned in
// host/component/testdata/build (componentEmbed + componentNew with the
// wasi_snapshot_preview1 reactor adapter), the way a user would.
//
// It needs node and `npm ci` run in that directory (make component-deps);
// without them a test skips, saying what to run.
package componenttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Dir is host/component/testdata/build, found from this file.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "build")
}

// Root is the repository root.
func Root() string { return filepath.Join(Dir(), "..", "..", "..", "..") }

// Wrap turns the core module at core (a path) into a component for the
// WIT world (e.g. "capsule:guest/capsule" from the repo's wit/), written
// under t.TempDir(); it returns the component's path. The build takes a
// few seconds and is bounded by a minute.
func Wrap(t testing.TB, core, world string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIP (component fixtures): node is not installed; install node and run `npm ci --prefix host/component/testdata/build` (make component-deps)")
	}
	if _, err := os.Stat(filepath.Join(Dir(), "node_modules", "@bytecodealliance", "jco", "package.json")); err != nil {
		t.Skip("SKIP (component fixtures): jco is not installed; run `npm ci --prefix host/component/testdata/build` (make component-deps)")
	}
	out := filepath.Join(t.TempDir(), filepath.Base(core)+".component.wasm")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "build.mjs", filepath.Join(Root(), "wit"), world, core, out)
	cmd.Dir = Dir()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("jco build of %s: %v\n%s", core, err, b)
	}
	return out
}

// Package sdktest runs a capsule's own Go tests: it compiles the capsule
// to wasm and loads it in an in-process host (the same host package the
// daemon runs), so a test calls the capsule's tools through the real
// engine, contract and process registry, without a daemon.
//
// A capsule's test file (built natively, not for wasip1) looks like:
//
//	func TestMain(m *testing.M) { sdktest.Main(m) }
//
//	func TestGreet(t *testing.T) {
//		c := sdktest.Build(t, ".")
//		out, err := c.Call("greet", `{"name":"world"}`)
//		...
//	}
//
// `capsule-host new` writes such a test.
package sdktest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/bwrap"
	"github.com/capsule-host/capsule-host/sandbox/local"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// Main is the capsule test's TestMain: the local backend starts its
// processes through a re-executed copy of the test binary, which must
// become that helper before any test runs.
func Main(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// Capsule is one capsule loaded in an in-process host.
type Capsule struct {
	// Name is the capsule's name from its manifest.
	Name string
	// Dir is the directory it was loaded from (for Build: a temporary
	// copy holding the fresh module and a pinned manifest).
	Dir string
	// Principal is who calls act for ("test" unless changed).
	Principal string
	h         *host.Host
}

// BuildFlags are the go build flags of a reproducible capsule module (the
// same as capsules/build.sh and the scaffold's build.sh).
var BuildFlags = []string{"-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-ldflags=-buildid="}

// Build compiles the package main in dir for wasip1 into a temporary
// directory, writes there a copy of dir's manifest pinned to the fresh
// module, and loads that copy: the test runs the source as it is now,
// whether or not the committed module was rebuilt.
func Build(t testing.TB, dir string) *Capsule {
	t.Helper()
	src, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(src, manifest.FileName)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	m, err := manifest.ParseUnpinned(file, data)
	if err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, m.Module)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := compile(src, out); err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	p, err := manifest.Pin(file, data, hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, manifest.FileName), p.Text, 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(t, tmp)
}

// compile runs go build for wasip1, bounded by two minutes (a cold module
// cache compiles the runtime).
func compile(src, out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(append([]string{"build"}, BuildFlags...), "-o", out, ".")
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWASM=", "GOEXPERIMENT=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build (GOOS=wasip1) in %s: %w\n%s", src, err, b)
	}
	return nil
}

// Load loads the capsule directory dir as it is (its module built and
// pinned) into a fresh in-process host with the local backend and, when
// bwrap is installed, the bwrap sandbox (the daemon's default backend).
// The host and every process it started are closed when the test ends.
// A $CAPSULE_HOST_CACHE_DIR (host.CacheEnv) is its compile cache, so a
// module validate already compiled is not compiled again.
func Load(t testing.TB, dir string) *Capsule {
	t.Helper()
	state := t.TempDir()
	b, err := local.New(local.Options{})
	if err != nil {
		t.Fatalf("sdktest: local backend: %v", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	backends := map[string]sandbox.Backend{"local": b}
	names := []string{"local"}
	if bw, err := bwrap.New(bwrap.Options{StateDir: state}); err == nil {
		backends["bwrap"] = bw
		names = append(names, "bwrap")
	}
	reg, err := registry.New(registry.Config{Backends: backends, StateDir: filepath.Join(state, "registry"), Logger: log})
	if err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	t.Cleanup(func() { reg.Shutdown(context.Background()) })
	h, err := host.New(context.Background(), host.Config{Registry: reg, Backends: names, StateDir: state, Logger: log, CallTimeout: 30 * time.Second, CacheDir: host.EnvCacheDir("")})
	if err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := h.Load(ctx, dir)
	if err != nil {
		t.Fatalf("sdktest: loading %s: %v", dir, err)
	}
	return &Capsule{Name: c.Manifest.Name, Dir: dir, Principal: "test", h: h}
}

// ErrTool is the class of a tool's own error result (the err string of
// the contract's call); Call wraps it, so errors.Is(err, ErrTool) tells a
// tool's refusal from a host failure (trap, timeout).
var ErrTool = host.ErrToolFailed

// Call calls tool with the JSON input and returns its JSON output. It is
// bounded by the host's call timeout.
func (c *Capsule) Call(tool, input string) (string, error) {
	ctx := host.WithPrincipal(context.Background(), c.Principal)
	r, err := c.h.Call(ctx, c.Name, tool, input)
	if err != nil {
		return "", err
	}
	return r.Output, nil
}

// Tools names the tools the capsule described.
func (c *Capsule) Tools() []string {
	hc, ok := c.h.Capsule(c.Name)
	if !ok {
		return nil
	}
	var names []string
	for _, t := range hc.Tools() {
		names = append(names, t.Name)
	}
	return names
}

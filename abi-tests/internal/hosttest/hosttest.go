// Package hosttest runs guests against the real host: the real registry
// with the real local sandbox backend, and host.New + Load + Call, exactly
// as the daemon wires them. No fakes: the conformance suite must observe
// what a capsule would.
package hosttest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// Env is a host with its registry, torn down by t.Cleanup.
type Env struct {
	Host *host.Host
	Reg  *registry.Registry
	Dir  string
}

// New starts a registry (local backend) and a host in a temporary state
// directory.
func New(t testing.TB) *Env {
	t.Helper()
	dir := t.TempDir()
	lb, err := local.New(local.Options{NoCgroups: os.Getenv("ABI_TESTS_NOCGROUPS") != ""})
	if err != nil {
		t.Fatalf("local backend: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	}
	reg, err := registry.New(registry.Config{
		Backends: map[string]sandbox.Backend{"local": lb},
		StateDir: filepath.Join(dir, "registry"),
		Logger:   logger,
	})
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{
		Engine:      enginetest.HostEngine(), // "" (wazero) unless the wasmtime leg sets it
		Registry:    reg,
		StateDir:    filepath.Join(dir, "host"),
		Logger:      logger,
		CallTimeout: 60 * time.Second,
	})
	if err != nil {
		t.Fatalf("host: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("host close: %v", err)
		}
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("registry shutdown: %v", err)
		}
	})
	return &Env{Host: h, Reg: reg, Dir: dir}
}

// Capsule describes a capsule directory to write.
type Capsule struct {
	Name            string
	Wasm            []byte
	Imports         map[string]string // e.g. "capsule:process": "1.1"
	Exec            []string
	AllowPersistent bool
	PoolMax         int // 0: 2
}

// Write creates the capsule directory (module + Capsule.toml with the
// module's sha256) under the env's directory and returns it.
func (e *Env) Write(t testing.TB, c Capsule) string {
	t.Helper()
	dir := filepath.Join(e.Dir, "capsules", c.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "module.wasm"), c.Wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.Wasm)
	var b strings.Builder
	fmt.Fprintf(&b, "[capsule]\nname = %q\nversion = \"1.0.0\"\nmodule = \"module.wasm\"\nsha256 = %q\n", c.Name, hex.EncodeToString(sum[:]))
	b.WriteString("\n[imports]\n")
	for k, v := range c.Imports {
		fmt.Fprintf(&b, "%q = %q\n", k, v)
	}
	b.WriteString("\n[capabilities]\nexec = [")
	for i, x := range c.Exec {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", x)
	}
	fmt.Fprintf(&b, "]\nallow_persistent = %v\nbackend = \"local\"\n", c.AllowPersistent)
	max := c.PoolMax
	if max == 0 {
		max = 2
	}
	fmt.Fprintf(&b, "\n[pool]\nmin_idle = 0\nmax = %d\n", max)
	if err := os.WriteFile(filepath.Join(dir, "Capsule.toml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Load writes and loads a capsule.
func (e *Env) Load(t testing.TB, c Capsule) *host.Capsule {
	t.Helper()
	cap, err := e.Host.Load(context.Background(), e.Write(t, c))
	if err != nil {
		t.Fatalf("load capsule %s: %v", c.Name, err)
	}
	return cap
}

// logLevel is warn, or debug with ABI_TESTS_DEBUG=1 (and go test -v).
func logLevel() slog.Level {
	if os.Getenv("ABI_TESTS_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

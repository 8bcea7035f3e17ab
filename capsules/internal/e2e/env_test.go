package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/bwrap"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// capsulesDir is capsules/ in this checkout.
func capsulesDir(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

type env struct {
	t   *testing.T
	h   *host.Host
	reg *registry.Registry
}

// newEnv starts a Host on the real registry and local backend and loads
// the named capsules from their committed directories.
func newEnv(t *testing.T, capsules ...string) *env {
	t.Helper()
	h, reg := newHostReg(t, capsules...)
	return &env{t: t, h: h, reg: reg}
}

// newBenchEnv is newEnv for benchmarks.
func newBenchEnv(b *testing.B, capsules ...string) *host.Host {
	return newHost(b, append(capsules, "testcap")...)
}

func newHost(t testing.TB, capsules ...string) *host.Host {
	t.Helper()
	h, _ := newHostReg(t, capsules...)
	return h
}

// newHostReg is newHost that also returns the registry, for tests that
// shut it down themselves (the hammer's leak checks).
func newHostReg(t testing.TB, capsules ...string) (*host.Host, *registry.Registry) {
	t.Helper()
	return newHostRegQuotas(t, registry.Quotas{}, capsules...)
}

// newHostRegQuotas is newHostReg with the registry's quotas (zero fields:
// the defaults).
func newHostRegQuotas(t testing.TB, q registry.Quotas, capsules ...string) (*host.Host, *registry.Registry) {
	t.Helper()
	return newHostRegConfig(t, func(c *registry.Config) { c.Quotas = q }, capsules...)
}

// newHostRegConfig is newHostReg with the registry's configuration
// changed by mut before it starts (a keeper-backed persistent backend).
func newHostRegConfig(t testing.TB, mut func(*registry.Config), capsules ...string) (*host.Host, *registry.Registry) {
	t.Helper()
	b, err := local.New(local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	backends := map[string]sandbox.Backend{"local": b}
	// The bundled shell capsule asks for bwrap (issue 13), as the daemon
	// builds it: an unprivileged sandbox user when root.
	bo := bwrap.Options{}
	if os.Geteuid() == 0 {
		bo.User = &sandbox.Owner{UID: 65534, GID: 65534}
	}
	if bw, err := bwrap.New(bo); err == nil {
		backends["bwrap"] = bw
	} else if slices.Contains(capsules, "shell") || slices.Contains(capsules, "mcp-stdio") {
		t.Skipf("SKIP: the shell and mcp-stdio capsules need bwrap: %v", err)
	}
	cfg := registry.Config{
		Backends: backends,
		StateDir: t.TempDir(),
		Logger:   logger,
	}
	if mut != nil {
		mut(&cfg)
	}
	reg, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Shutdown(context.Background()) })
	h, err := host.New(context.Background(), host.Config{
		Engine:      enginetest.HostEngine(), // "" (wazero) unless the wasmtime leg sets it
		CacheDir:    moduleCache(),
		Registry:    reg,
		StateDir:    t.TempDir(),
		Logger:      logger,
		CallTimeout: 30 * time.Second,
		Backends:    slices.Sorted(maps.Keys(backends)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	for _, c := range capsules {
		if _, err := h.Load(context.Background(), capsuleDir(t, c)); err != nil {
			t.Fatalf("load %s: %v", c, err)
		}
	}
	return h, reg
}

// call runs a tool as principal and decodes its JSON output into out
// (if non-nil). It fails the test on any error.
func (e *env) call(principal, capsule, tool string, input any, out any) uint64 {
	e.t.Helper()
	r, err := e.try(principal, capsule, tool, input)
	if err != nil {
		e.t.Fatalf("%s.%s(%s): %v", capsule, tool, mustJSON(e.t, input), err)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(r.Output), out); err != nil {
			e.t.Fatalf("%s.%s: output %s: %v", capsule, tool, r.Output, err)
		}
	}
	return r.Instance
}

func (e *env) try(principal, capsule, tool string, input any) (host.Result, error) {
	ctx := host.WithPrincipal(context.Background(), principal)
	return e.h.Call(ctx, capsule, tool, mustJSON(e.t, input))
}

// toolErr runs a tool that must answer an err result containing want.
func (e *env) toolErr(principal, capsule, tool string, input any, want string) {
	e.t.Helper()
	_, err := e.try(principal, capsule, tool, input)
	var te *host.ToolError
	if !errors.As(err, &te) || !strings.Contains(te.Message, want) {
		e.t.Errorf("%s.%s(%s) = %v; want a tool error containing %q", capsule, tool, mustJSON(e.t, input), err, want)
	}
}

// inputErr asserts the host refused input against the tool's declared
// schema before the guest ran: an *host.InvalidInputError at path for
// rule.
func (e *env) inputErr(principal, capsule, tool string, input any, path, rule string) {
	e.t.Helper()
	_, err := e.try(principal, capsule, tool, input)
	var ie *host.InvalidInputError
	if !errors.As(err, &ie) || ie.Path != path || ie.Rule != rule {
		e.t.Errorf("%s.%s(%s) = %v; want the host's invalid input at %q, rule %q", capsule, tool, mustJSON(e.t, input), err, path, rule)
	}
}

func mustJSON(t testing.TB, v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

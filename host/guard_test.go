package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
)

// The guard fixture's tools check nothing themselves: what these tests
// see refused, the host refused.
const (
	guardWasm     = "testdata/guard/guard.wasm"
	badSchemaWasm = "testdata/badschema/badschema.wasm"
)

// A call's input is validated against the tool's declared JSON Schema
// before the guest runs: {"port": 80} does not pass "minimum": 1024, and
// the error names the path and the rule.
func TestInputValidatedAgainstSchema(t *testing.T) {
	e := newHost(t, nil)
	ctx := context.Background()
	if _, err := e.h.Load(ctx, capsuleDir(t, "guard", guardWasm, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.h.Call(ctx, "guard", "port", `{"port":8080}`); err != nil {
		t.Fatalf("valid input: %v", err)
	}
	for _, tc := range []struct{ in, path, rule string }{
		{`{"port":80}`, "/port", "minimum"},
		{`{"port":"8080"}`, "/port", "type"},
		{`{}`, "", "required"},
		{`[1]`, "", "type"},
		{`{"port":8080} trailing`, "", "json"},
	} {
		_, err := e.h.Call(ctx, "guard", "port", tc.in)
		var ie *host.InvalidInputError
		if !errors.As(err, &ie) || !errors.Is(err, host.ErrInvalidInput) || ie.Path != tc.path || ie.Rule != tc.rule || ie.Tool != "port" {
			t.Errorf("%s: %v; want invalid input at %q, rule %q", tc.in, err, tc.path, tc.rule)
		}
	}
	_, err := e.h.Call(ctx, "guard", "port", `{"port":80}`)
	if msg := err.Error(); !strings.Contains(msg, "/port") || !strings.Contains(msg, "minimum") || !strings.Contains(msg, "got 80") {
		t.Errorf("message %q: want the path, the rule and the bound", msg)
	}
}

// A schema that does not compile refuses the capsule at load, naming the
// tool and what is wrong; nothing is left loaded.
func TestUncompilableSchemaRefusesLoad(t *testing.T) {
	e := newHost(t, nil)
	_, err := e.h.Load(context.Background(), capsuleDir(t, "badschema", badSchemaWasm, ""))
	if !errors.Is(err, host.ErrDescribe) || !strings.Contains(err.Error(), `tool "bad"`) || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("load: %v; want a describe error naming tool \"bad\" and its schema's fault", err)
	}
	if _, ok := e.h.Capsule("badschema"); ok {
		t.Fatal("the capsule was loaded anyway")
	}
}

// A hostile guest that grows its memory without end is stopped at the
// host's default ceiling (256 MiB per instance): its memory.grow is
// refused, it traps, the trap names the limit, and the pool keeps
// serving. Both engines (the wasmtime leg runs this with -tags wasmtime).
func TestGuestMemoryDefaultCeiling(t *testing.T) {
	// Growing to 256 MiB is real work for the engine (wazero copies the
	// memory as it doubles): the call gets room so a busy machine cannot
	// turn the trap into a timeout.
	e := newHost(t, func(c *host.Config) { c.CallTimeout = 2 * time.Minute })
	ctx := context.Background()
	c, err := e.h.Load(ctx, capsuleDir(t, "guard", guardWasm, "[pool]\nmin_idle = 1\nmax = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.h.Call(ctx, "guard", "grow", "{}")
	var te *host.TrapError
	if !errors.As(err, &te) || !errors.Is(err, host.ErrMemoryLimit) || !errors.Is(err, host.ErrTrap) {
		t.Fatalf("grow: %v; want a trap at the memory limit (the guest grew to 320 MiB unchecked)", err)
	}
	if te.MemoryLimit != host.DefaultGuestMemoryBytes || te.MemoryBytes != host.DefaultGuestMemoryBytes ||
		!strings.Contains(te.Reason, "268435456") {
		t.Fatalf("trap %+v: want the instance stopped at the default limit, named in the reason", te)
	}
	if r, err := e.h.Call(ctx, "guard", "noop", "{}"); err != nil || r.Output != "{}" {
		t.Fatalf("the pool stopped serving after the trap: %+v %v", r, err)
	}
	if st := c.Stats(); st.Discarded != 1 {
		t.Fatalf("stats %+v: want exactly the trapped instance discarded", st)
	}
}

// A manifest lowers the per-instance limit (pool.memory_bytes); raising
// the host's is refused, as is a pool whose instances together could hold
// more than the host's per-capsule total; each error names both numbers.
func TestGuestMemoryManifestLimits(t *testing.T) {
	e := newHost(t, func(c *host.Config) {
		c.GuestMemoryBytes = 16 << 20
		c.CapsuleGuestMemoryBytes = 64 << 20
	})
	ctx := context.Background()
	if _, err := e.h.Load(ctx, capsuleDir(t, "guard", guardWasm, "[pool]\nmax = 2\nmemory_bytes = 4194304\n")); err != nil {
		t.Fatal(err)
	}
	_, err := e.h.Call(ctx, "guard", "grow", "{}")
	var te *host.TrapError
	if !errors.As(err, &te) || !errors.Is(err, host.ErrMemoryLimit) || te.MemoryLimit != 4<<20 || te.MemoryBytes != 4<<20 {
		t.Fatalf("grow under pool.memory_bytes = 4 MiB: %v (%+v)", err, te)
	}
	for _, tc := range []struct{ extra, key, a, b string }{
		{"[pool]\nmemory_bytes = 33554432\n", "pool.memory_bytes", "33554432", "16777216"},
		{"[pool]\nmax = 5\n", "pool.max", "83886080", "67108864"},
		{"[pool]\nmax = 16\nmemory_bytes = 8388608\n", "pool.max", "134217728", "67108864"},
	} {
		_, err := e.h.Load(ctx, capsuleDir(t, "guard2", guardWasm, tc.extra))
		if !errors.Is(err, host.ErrPolicy) || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.a) || !strings.Contains(err.Error(), tc.b) {
			t.Errorf("%q: %v; want a policy error at %s naming %s and %s", tc.extra, err, tc.key, tc.a, tc.b)
		}
	}
	// The host's own ceilings are checked too.
	for _, cfg := range []host.Config{{GuestMemoryBytes: 1000}, {GuestMemoryBytes: 8 << 30}, {GuestMemoryBytes: 64 << 20, CapsuleGuestMemoryBytes: 32 << 20}} {
		cfg.Registry, cfg.StateDir = e.reg, t.TempDir()
		if _, err := host.New(ctx, cfg); err == nil {
			t.Errorf("host.New accepted guest memory %d / %d", cfg.GuestMemoryBytes, cfg.CapsuleGuestMemoryBytes)
		}
	}
}

// Package e2e runs the end-to-end conformance guests (guest/full for
// capsule:process@1.1.0, guest/ephemeral for 1.0.0), built with the
// standard Go toolchain, against the real host: host.New + Load + Call on
// the real registry and the local sandbox backend. Every WIT function of
// both versions must be called, and every check inside the guest must
// pass.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/abi-tests/internal/hosttest"
	"github.com/capsule-host/capsule-host/abi-tests/internal/witsrc"
	"github.com/capsule-host/capsule-host/host"
)

const modRoot = ".."

type report struct {
	Called   []string          `json:"called"`
	Failures []string          `json:"failures"`
	Data     map[string]string `json:"data"`
}

// caller runs tool calls and accumulates the WIT functions they called.
type caller struct {
	t      *testing.T
	env    *hosttest.Env
	called map[string]map[string]bool // capsule -> functions
}

func (c *caller) call(ctx context.Context, capsule, tool, input string) report {
	c.t.Helper()
	res, err := c.env.Host.Call(ctx, capsule, tool, input)
	out := res.Output
	var te *host.ToolError
	if errors.As(err, &te) {
		// The guest's checks failed: its message lists them, then the
		// report (for the coverage accounting).
		_, out, _ = strings.Cut(te.Message, "\nreport: ")
	} else if err != nil {
		c.t.Fatalf("%s %s: %v", capsule, tool, err)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		c.t.Fatalf("%s %s: output %q: %v (error: %v)", capsule, tool, out, err, te)
	}
	if len(r.Failures) > 0 {
		c.t.Errorf("%s %s: %d checks failed:\n  %s", capsule, tool, len(r.Failures), strings.Join(r.Failures, "\n  "))
	}
	if c.called[capsule] == nil {
		c.called[capsule] = map[string]bool{}
	}
	for _, f := range r.Called {
		c.called[capsule][f] = true
	}
	c.t.Logf("%s %s: called %d functions", capsule, tool, len(r.Called))
	return r
}

// requireCoverage fails unless the calls made on capsule covered every
// function (and resource drop) of the WIT interface module.
func (c *caller) requireCoverage(capsule, module string) {
	c.t.Helper()
	res, err := witsrc.Load(modRoot)
	if err != nil {
		c.t.Fatal(err)
	}
	var want []string
	for _, iface := range witsrc.Interfaces(res, "capsule:process") {
		if witsrc.InterfaceID(iface) != module {
			continue
		}
		fs, err := witsrc.Imports(iface)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, f := range fs {
			want = append(want, f.Name)
		}
	}
	if len(want) == 0 {
		c.t.Fatalf("WIT has no interface %s", module)
	}
	var missing []string
	for _, f := range want {
		if !c.called[capsule][f] {
			missing = append(missing, f)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		c.t.Errorf("%s: the guest never called %s of %s", capsule, strings.Join(missing, ", "), module)
	}
}

func TestGuestsAgainstHost(t *testing.T) {
	full := hosttest.BuildGuest(t, modRoot, "./guest/full")
	eph := hosttest.BuildGuest(t, modRoot, "./guest/ephemeral")
	env := hosttest.New(t)
	env.Load(t, hosttest.Capsule{Name: "abi-full", Wasm: full, Imports: map[string]string{"capsule:process": "1.1"},
		Exec: []string{"/bin/sh"}, AllowPersistent: true, PoolMax: 2})
	env.Load(t, hosttest.Capsule{Name: "abi-ephemeral", Wasm: eph, Imports: map[string]string{"capsule:process": "1.0"},
		Exec: []string{"/bin/sh"}, PoolMax: 2})
	c := &caller{t: t, env: env, called: map[string]map[string]bool{}}
	alice := host.WithPrincipal(context.Background(), "alice")
	bob := host.WithPrincipal(context.Background(), "bob")

	t.Run("echo", func(t *testing.T) {
		c.t = t
		in := `{"s":"héllo, 世界 \u0000 ✓"}`
		for _, capsule := range []string{"abi-full", "abi-ephemeral"} {
			if r := c.call(alice, capsule, "echo", in); r.Data["echo"] != in {
				t.Errorf("%s echo: %q, want %q", capsule, r.Data["echo"], in)
			}
		}
	})
	t.Run("1.1.0/ephemeral", func(t *testing.T) {
		c.t = t
		c.call(alice, "abi-full", "ephemeral", "{}")
	})
	t.Run("1.0.0/ephemeral", func(t *testing.T) {
		c.t = t
		c.call(alice, "abi-ephemeral", "ephemeral", "{}")
	})
	t.Run("1.1.0/persistent", func(t *testing.T) {
		c.t = t
		id := c.call(alice, "abi-full", "persist_start", "{}").Data["id"]
		in, _ := json.Marshal(map[string]string{"id": id})
		// Another principal sees nothing, exactly as for an unknown ID.
		if r := c.call(bob, "abi-full", "persist_probe", string(in)); r.Data["status"] != "no-such-process" || r.Data["attach"] != "no-such-process" {
			t.Errorf("bob's view of alice's process: status %q attach %q, want no-such-process", r.Data["status"], r.Data["attach"])
		}
		// A later call of alice (any instance) reattaches by ID.
		c.call(alice, "abi-full", "persist_use", string(in))
		// The owner-fallback principal cannot hold persistent processes.
		c.call(context.Background(), "abi-full", "persist_denied", "{}")
	})
	c.t = t
	c.requireCoverage("abi-full", "capsule:process/host@1.1.0")
	c.requireCoverage("abi-ephemeral", "capsule:process/host@1.0.0")
}

// TestGuestsConcurrently runs the 1.1.0 ephemeral checks from several
// principals at once on a pool of several instances: instances share the
// host but none may see another's handles or processes.
func TestGuestsConcurrently(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	full := hosttest.BuildGuest(t, modRoot, "./guest/full")
	env := hosttest.New(t)
	env.Load(t, hosttest.Capsule{Name: "abi-full", Wasm: full, Imports: map[string]string{"capsule:process": "1.1"},
		Exec: []string{"/bin/sh"}, AllowPersistent: true, PoolMax: 4})
	const n = 4
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			ctx := host.WithPrincipal(context.Background(), "p"+strconv.Itoa(i))
			_, err := env.Host.Call(ctx, "abi-full", "ephemeral", "{}")
			errs <- err
		}(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

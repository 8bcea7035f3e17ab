// Package hostile runs WAT guests that feed the host malformed Canonical
// ABI input (testdata/hostile/hostile.wat). Each malformed import call must
// trap that call with a reason naming what was wrong, the trapped instance
// must be discarded, and the host must go on serving: the same capsule on
// another instance, and other capsules.
package hostile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/abi-tests/internal/hosttest"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

const dir = "../testdata/hostile"

// TestHostileWasmIsFreshBuild checks that every committed .wasm is what
// wat2wasm makes of the .wat beside it, so the fixtures cannot drift from
// their reviewed sources.
func TestHostileWasmIsFreshBuild(t *testing.T) {
	testutil.CheckWATFixtures(t, filepath.Join(dir, "*.wat"))
}

// cases pairs each hostile tool with the import it calls (the trap must
// name it) and what the reason must say (a case-insensitive regexp).
var cases = []struct {
	tool, fn, reason string
}{
	{"b_oob_string", "status", `string .*out of (bounds|range)`},
	{"c_len_past_memory", "status", `\+200000\).*out of (bounds|range)`},
	{"d_len_wraps", "status", `out of (bounds|range)|overflow`},
	{"e_misaligned_retptr", "status", `return pointer 0x1001 .*align`},
	{"f_misaligned_list", "status-many", `list<string> pointer 0x121 .*align`},
	{"g_invalid_utf8", "status", `not valid utf-?8`},
	{"h_realloc_oob", "spawn", `cabi_realloc.*out of (bounds|range)`},
	{"i_forged_handle", "[method]process-handle.os-pid", `handle 12345\b.*(no such|unknown|invalid)`},
	{"j_null_handle", "[method]process-handle.os-pid", `handle 0\b.*null`},
	{"k_dropped_handle", "[method]process-handle.os-pid", `handle \d+\b.*dropped`},
	{"l_double_drop", "[resource-drop]process-handle", `handle \d+\b.*dropped`},
	{"m_bad_enum", "signal", `process-signal.*discriminant 99`},
	{"n_bad_option", "read-since", `option<string>.*discriminant 7`},
	{"o_params_oob", "spawn-persistent", `params.*out of (bounds|range)`},
	{"p_retptr_oob", "status", `return area.*out of (bounds|range)`},
	{"q_wait_bad_option", "[method]process-handle.wait", `option<u64>.*discriminant 2`},
	{"r_len_over_limit", "status", `2\^28-1`},
}

func hostileCapsule(t *testing.T, name string) hosttest.Capsule {
	wasm, err := os.ReadFile(filepath.Join(dir, "hostile.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return hosttest.Capsule{
		Name:    name,
		Wasm:    wasm,
		Imports: map[string]string{"capsule:process": "1.1"},
		Exec:    []string{"/bin/sh"},
		PoolMax: 2,
	}
}

func TestHostileInputTraps(t *testing.T) {
	env := hosttest.New(t)
	victim := env.Load(t, hostileCapsule(t, "hostile"))
	env.Load(t, hostileCapsule(t, "hostile-peer"))
	ctx := host.WithPrincipal(context.Background(), "abi-tests")

	ok := func(t *testing.T, capsule string) host.Result {
		t.Helper()
		r, err := env.Host.Call(ctx, capsule, "a_ok", "{}")
		if err != nil {
			t.Fatalf("%s a_ok after a trap: %v", capsule, err)
		}
		if r.Output != "{}" {
			t.Fatalf("%s a_ok: output %q, want {}", capsule, r.Output)
		}
		return r
	}
	ok(t, "hostile")
	before := victim.Stats()

	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			r, err := env.Host.Call(ctx, "hostile", c.tool, "{}")
			var te *host.TrapError
			if !errors.As(err, &te) || !errors.Is(err, host.ErrTrap) {
				t.Fatalf("%s: got (%+v, %v), want a *host.TrapError", c.tool, r, err)
			}
			t.Logf("trap reason: %s", te.Reason)
			if !strings.Contains(te.Reason, "capsule:process/host@1.1.0#"+c.fn) {
				t.Errorf("%s: trap reason %q does not name the import capsule:process/host@1.1.0#%s", c.tool, te.Reason, c.fn)
			}
			if !regexp.MustCompile("(?i)" + c.reason).MatchString(te.Reason) {
				t.Errorf("%s: trap reason %q does not say what was wrong (want /%s/)", c.tool, te.Reason, c.reason)
			}
			if te.Capsule != "hostile" || te.Tool != c.tool {
				t.Errorf("trap names capsule %q tool %q, want hostile %s", te.Capsule, te.Tool, c.tool)
			}
			// The same capsule serves on another instance: the trapped
			// one was discarded (h_realloc_oob's instance would also fail
			// lowering the next call's arguments if it were reused).
			if next := ok(t, "hostile"); next.Instance == te.Instance {
				t.Errorf("the instance %d that trapped served the next call", te.Instance)
			}
			ok(t, "hostile-peer")
		})
	}
	after := victim.Stats()
	if got := after.Discarded - before.Discarded; got < uint64(len(cases)) {
		t.Errorf("pool discarded %d instances over %d traps", got, len(cases))
	}
}

// TestPostReturnIsOptional loads a guest that exports no cabi_post_*
// function, as wit-bindgen-go v0.7.0 generates its exports. Post-return is
// an optional canonical option: the host must call it only when exported.
func TestPostReturnIsOptional(t *testing.T) {
	wasm, err := os.ReadFile(filepath.Join(dir, "minimal.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	env := hosttest.New(t)
	env.Load(t, hosttest.Capsule{Name: "minimal", Wasm: wasm})
	for i := 0; i < 3; i++ {
		r, err := env.Host.Call(context.Background(), "minimal", "noop", `{"n":1}`)
		if err != nil {
			t.Fatalf("call %d of a guest without cabi_post_*: %v", i, err)
		}
		if r.Output != "{}" {
			t.Fatalf("output %q, want {}", r.Output)
		}
	}
}

// TestPostReturnIsCalledWhenExported: a guest that exports
// cabi_post_<export> must have it called, with the export's return
// pointer, once the host has read the results (the Canonical ABI's
// post-return; wit-bindgen's guests free their result buffers there).
func TestPostReturnIsCalledWhenExported(t *testing.T) {
	wasm, err := os.ReadFile(filepath.Join(dir, "postreturn.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	env := hosttest.New(t)
	env.Load(t, hosttest.Capsule{Name: "postreturn", Wasm: wasm, PoolMax: 1})
	var outs []string
	var inst []uint64
	for i := 0; i < 2; i++ {
		r, err := env.Host.Call(context.Background(), "postreturn", "posts", "{}")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		outs, inst = append(outs, r.Output), append(inst, r.Instance)
	}
	if inst[0] != inst[1] {
		t.Skipf("LOUD SKIP: the two calls ran on different instances (%d, %d) despite [pool] max = 1; cannot observe post-return", inst[0], inst[1])
	}
	if outs[1] != "1" {
		t.Errorf("after a call, the guest's cabi_post_capsule:guest/tool@1.0.0#call had not run (outputs %q): the host must call an exported post-return after reading the results", outs)
	}
}

// TestLayout10 runs a 1.0.0 guest whose return area is 4-aligned (enough
// for 1.0.0's result<process-result, error-code>, not for 1.1.0's): the
// host must lower 1.0.0 results with 1.0.0's layout.
func TestLayout10(t *testing.T) {
	wasm, err := os.ReadFile(filepath.Join(dir, "layout10.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	env := hosttest.New(t)
	env.Load(t, hosttest.Capsule{Name: "layout10", Wasm: wasm, Imports: map[string]string{"capsule:process": "1.0"}, Exec: []string{"/bin/sh"}})
	r, err := env.Host.Call(context.Background(), "layout10", "denied", "{}")
	if err != nil {
		t.Fatalf("1.0.0 spawn with a 4-aligned return area: %v", err)
	}
	if r.Output != "{}" {
		t.Fatalf("output %q", r.Output)
	}
}

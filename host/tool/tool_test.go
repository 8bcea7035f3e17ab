package tool_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/host/tool"
)

// The guests are hand-written WAT (testdata/*.wat, built with wat2wasm)
// run by the wazero engine: a real engine, real guest memory, real
// cabi_realloc and cabi_post_* calls.

func instantiate(t testing.TB, file string) engine.Instance {
	t.Helper()
	ctx := context.Background()
	wasm, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := wazero.New(ctx, engine.EngineConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	mod, err := eng.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	// The exports have the core types the host expects.
	want := map[string]string{}
	for _, s := range tool.Signatures() {
		want[s.Name] = cabi.FlatString(s.Params) + "->" + cabi.FlatString(s.Results)
	}
	for _, e := range mod.Exports() {
		if w, ok := want[e.Name]; ok && w != cabi.FlatString(e.Params)+"->"+cabi.FlatString(e.Results) {
			t.Fatalf("%s: core type %v -> %v, want %s", e.Name, e.Params, e.Results, w)
		}
	}
	inst, err := mod.Instantiate(ctx, engine.InstanceConfig{Name: file})
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

func setMode(t *testing.T, inst engine.Instance, m uint64) {
	t.Helper()
	if _, err := inst.Call(context.Background(), "set_mode", m); err != nil {
		t.Fatal(err)
	}
}

func posts(t *testing.T, inst engine.Instance) uint64 {
	t.Helper()
	r, err := inst.Call(context.Background(), "posts")
	if err != nil {
		t.Fatal(err)
	}
	return r[0]
}

func TestDescribeAndCall(t *testing.T) {
	ctx := context.Background()
	inst := instantiate(t, "tool.wasm")
	specs, err := tool.Describe(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	want := tool.Spec{Name: "echo", Description: "Echoes its input", InputSchema: `{"type":"object"}`}
	if len(specs) != 1 || specs[0] != want {
		t.Fatalf("describe = %#v", specs)
	}
	out, toolErr, err := tool.Call(ctx, inst, "echo", `{"text":"héllo"}`)
	if err != nil || toolErr != nil || out != `{"text":"héllo"}` {
		t.Fatalf("call echo = %q, %v, %v", out, toolErr, err)
	}
	out, toolErr, err = tool.Call(ctx, inst, "nope", `{}`)
	if err != nil || toolErr == nil || *toolErr != "unknown tool" || out != "" {
		t.Fatalf("call nope = %q, %v, %v", out, toolErr, err)
	}
	// Empty arguments take no allocation and still work.
	if _, toolErr, err = tool.Call(ctx, inst, "", ""); err != nil || toolErr == nil {
		t.Fatalf("empty call: %v %v", toolErr, err)
	}
	if n := posts(t, inst); n != 4 {
		t.Errorf("cabi_post_* called %d times, want 4", n)
	}
}

func TestNoPostReturn(t *testing.T) {
	ctx := context.Background()
	inst := instantiate(t, "tool_nopost.wasm")
	specs, err := tool.Describe(ctx, inst)
	if err != nil || len(specs) != 0 {
		t.Fatalf("describe = %v, %v", specs, err)
	}
	out, toolErr, err := tool.Call(ctx, inst, "x", "in")
	if err != nil || toolErr != nil || out != "in" {
		t.Fatalf("call = %q %v %v", out, toolErr, err)
	}
}

// TestBadGuestResults: every malformed result is an ErrBadResult (or a
// trap) naming the problem; the host never panics.
func TestBadGuestResults(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		mode     uint64
		describe bool
		want     string
		trap     bool
	}{
		{1, true, "list<tool-spec> pointer 0x302 not aligned to 4", false},
		{2, true, "out of bounds", false},
		{3, true, "[0].name: canonical ABI violation: string at 0x150 is not valid UTF-8", false},
		{4, true, "exceeds 2^28-1", false},
		{8, true, "list<tool-spec> pointer 0x202 not aligned to 4", false},
		{5, false, "cabi_realloc result for string [0xfffffff0,", false},
		{6, false, "unreachable", true},
		{7, false, "discriminant 2 out of range", false},
		{9, false, "string [0xff00, +4096) out of bounds", false},
	}
	for _, tc := range tests {
		inst := instantiate(t, "tool.wasm")
		setMode(t, inst, tc.mode)
		var err error
		if tc.describe {
			_, err = tool.Describe(ctx, inst)
		} else {
			_, _, err = tool.Call(ctx, inst, "echo", "{}")
		}
		var tr *engine.Trap
		switch {
		case err == nil:
			t.Errorf("mode %d: no error", tc.mode)
		case tc.trap && !errors.As(err, &tr):
			t.Errorf("mode %d: %v, want a trap", tc.mode, err)
		case !tc.trap && (!errors.Is(err, tool.ErrBadResult) || !errors.Is(err, cabi.ErrABI)):
			t.Errorf("mode %d: %v, want ErrBadResult", tc.mode, err)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("mode %d: %v, want %q", tc.mode, err, tc.want)
		}
	}
}

// FuzzCall passes arbitrary names and inputs through a real guest round
// trip; invalid UTF-8 is refused before anything is called.
func FuzzCall(f *testing.F) {
	f.Add("echo", `{"a":1}`)
	f.Add("echo", "")
	inst := instantiate(f, "tool_nopost.wasm")
	f.Fuzz(func(t *testing.T, name, input string) {
		if len(input) > 2000 {
			return // the fixture's allocator is a fixed 4 KiB window
		}
		out, toolErr, err := tool.Call(context.Background(), inst, name, input)
		if !utf8.ValidString(name) || !utf8.ValidString(input) {
			if !errors.Is(err, tool.ErrInvalidArg) {
				t.Fatalf("invalid UTF-8 accepted: %v", err)
			}
			return
		}
		if err != nil {
			var tr *engine.Trap
			if !errors.Is(err, tool.ErrBadResult) && !errors.As(err, &tr) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if toolErr != nil || out != input {
			t.Fatalf("echo %q = %q %v", input, out, toolErr)
		}
	})
}

func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	inst := instantiate(b, "tool.wasm")
	input := strings.Repeat("x", 52)
	for b.Loop() {
		if _, _, err := tool.Call(ctx, inst, "echo", input); err != nil {
			b.Fatal(err)
		}
	}
}

package process

import (
	"context"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/host/internal/cabi/cabitest"
	"github.com/capsule-host/capsule-host/registry"
)

// harness drives the host functions the way a guest would: arguments are
// lowered into a fake guest memory (cabitest) with the function's own
// descriptor, the core function runs with the core stack, and the result
// is loaded back from the return area.
type harness struct {
	t     *testing.T
	reg   *registry.Registry
	funcs map[string]engine.HostFunc
	defs  map[string]def
	c     *cabitest.Caller
	ctx   context.Context
	inst  *Instance
}

var alice = registry.Caller{Capsule: "abi", Principal: "alice"}

func newHarness(t *testing.T, reg *registry.Registry) *harness {
	h := &harness{t: t, reg: reg, funcs: map[string]engine.HostFunc{}, defs: map[string]def{},
		c: cabitest.New(1<<22, 4096), inst: NewInstance()}
	for _, f := range HostFuncs(reg) {
		h.funcs[f.Module+" "+f.Name] = f
	}
	for _, v := range []*version{ver10, ver11, ver12} {
		for _, d := range v.funcs {
			h.defs[v.module+" "+d.f.Name] = d
		}
	}
	h.ctx = WithInstance(registry.WithCaller(context.Background(), alice), h.inst)
	return h
}

func newStubRegistry(t *testing.T) *registry.Registry {
	reg, err := registry.New(registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Shutdown(context.Background()) })
	return reg
}

// invoke runs one core function with a raw stack and returns its trap.
func (h *harness) invoke(ctx context.Context, mod, name string, stack ...uint64) (trap *engine.Trap) {
	h.t.Helper()
	f, ok := h.funcs[mod+" "+name]
	if !ok {
		h.t.Fatalf("%s %s not served", mod, name)
	}
	st := make([]uint64, max(len(f.Params), len(f.Results), len(stack)))
	copy(st, stack)
	defer func() {
		if r := recover(); r != nil {
			tr, ok := r.(*engine.Trap)
			if !ok {
				h.t.Fatalf("%s %s panicked with %T (%v), not *engine.Trap", mod, name, r, r)
			}
			trap = tr
		}
	}()
	f.Fn(ctx, h.c, st)
	return nil
}

// lower lowers args as a guest would and appends a return pointer when the
// result goes through one; it returns the stack and the return pointer.
func (h *harness) lower(mod, name string, args ...cabi.Value) ([]uint64, uint32) {
	h.t.Helper()
	d := h.defs[mod+" "+name]
	stack, err := d.f.LowerArgs(h.ctx, h.c, args...)
	if err != nil {
		h.t.Fatalf("lowering args of %s: %v", name, err)
	}
	var retptr uint32
	if p, _ := d.f.ImportSignature(); len(p) > len(stack) {
		retptr, err = h.c.Realloc(h.ctx, 0, 0, d.f.Result.Align(), d.f.Result.Size())
		if err != nil {
			h.t.Fatal(err)
		}
		stack = append(stack, uint64(retptr))
	}
	return stack, retptr
}

// call runs mod#name with args and returns its lifted result; a trap fails
// the test.
func (h *harness) call(mod, name string, args ...cabi.Value) cabi.Value {
	h.t.Helper()
	stack, retptr := h.lower(mod, name, args...)
	if tr := h.invoke(h.ctx, mod, name, stack...); tr != nil {
		h.t.Fatalf("%s %s trapped: %v", mod, name, tr)
	}
	d := h.defs[mod+" "+name]
	if d.f.Result == nil {
		return nil
	}
	v, err := cabi.Load(h.c.Mem, d.f.Result, retptr)
	if err != nil {
		h.t.Fatalf("%s %s: result does not load back: %v", mod, name, err)
	}
	return v
}

// trapOf runs mod#name with args and returns the trap reason ("" if none).
func (h *harness) trapOf(ctx context.Context, mod, name string, args ...cabi.Value) string {
	h.t.Helper()
	stack, _ := h.lower(mod, name, args...)
	if tr := h.invoke(ctx, mod, name, stack...); tr != nil {
		return tr.Reason
	}
	return ""
}

// ok returns the ok payload of a result, failing on an error case.
func (h *harness) ok(mod string, v cabi.Value) cabi.Value {
	h.t.Helper()
	r := v.(cabi.Variant)
	if r.Case != 0 {
		h.t.Fatalf("want ok, got error %s", h.errName(mod, v))
	}
	return r.Payload
}

// errName returns "case" or "case(payload)" of an error result.
func (h *harness) errName(mod string, v cabi.Value) string {
	h.t.Helper()
	r := v.(cabi.Variant)
	if r.Case != 1 {
		h.t.Fatalf("want an error, got ok %#v", r.Payload)
	}
	ec := tErrorCode11
	if mod == Module10 {
		ec = tErrorCode10
	}
	e := r.Payload.(cabi.Variant)
	return ec.Cases()[e.Case].Name
}

func bytesOf(v cabi.Value) string { return string(v.([]byte)) }

func TestMissingContextTraps(t *testing.T) {
	h := newHarness(t, newStubRegistry(t))
	bg := context.Background()
	if r := h.trapOf(bg, Module11, "status", "x"); !strings.Contains(r, "no registry.Caller") {
		t.Errorf("no caller: trap %q", r)
	}
	noInst := registry.WithCaller(bg, alice)
	if r := h.trapOf(noInst, Module11, "[method]process-handle.os-pid", uint32(1)); !strings.Contains(r, "no process.Instance") {
		t.Errorf("no instance: trap %q", r)
	}
	if r := h.trapOf(noInst, Module10, "[resource-drop]process-handle", uint32(1)); !strings.Contains(r, "no process.Instance") {
		t.Errorf("no instance (drop): trap %q", r)
	}
	// Functions without handles do not need the Instance.
	if r := h.trapOf(noInst, Module11, "status", "x"); r != "" {
		t.Errorf("status without instance trapped: %q", r)
	}
}

// TestHandleTraps: forged, null, dropped and double-dropped handles trap
// with a reason naming the handle, in both versions.
func TestHandleTraps(t *testing.T) {
	h := newHarness(t, newStubRegistry(t))
	for _, mod := range Served() {
		tests := []struct {
			name string
			idx  uint32
			want string
		}{
			{"[method]process-handle.os-pid", 0, "handle 0: index 0 is the reserved null handle"},
			{"[method]process-handle.kill", 7, "handle 7: no such handle (never created by this instance)"},
			{"[resource-drop]process-handle", 3, "handle 3: no such handle"},
		}
		for _, tc := range tests {
			r := h.trapOf(h.ctx, mod, tc.name, uint32(tc.idx))
			if !strings.HasPrefix(r, mod+"#"+tc.name+": process-handle") || !strings.Contains(r, tc.want) {
				t.Errorf("%s %s(%d): trap %q, want %q", mod, tc.name, tc.idx, r, tc.want)
			}
		}
	}
}

// TestArgumentTraps: malformed guest arguments trap naming the parameter.
func TestArgumentTraps(t *testing.T) {
	h := newHarness(t, newStubRegistry(t))
	mem := h.c.Mem.B
	copy(mem[100:], "bad\xc3\x28")
	tests := []struct {
		mod, name string
		stack     []uint64
		want      string
	}{
		{Module11, "status", []uint64{100, 5, 1024}, "status: id: canonical ABI violation: string at 0x64 is not valid UTF-8"},
		{Module11, "status", []uint64{1 << 22, 1, 1024}, "id: canonical ABI violation: string [0x400000, +1) out of bounds"},
		{Module11, "status", []uint64{0, 0, 1026}, "lowering the result: canonical ABI violation: return pointer 0x402 not aligned to 8"},
		{Module11, "status", []uint64{0, 0, 1<<22 - 8}, "return area for result<process-info, error-code> [0x3ffff8, +144) out of bounds"},
		{Module10, "[method]process-handle.signal", []uint64{1, 5, 1024}, "sig: canonical ABI violation: process-signal discriminant 5 out of range (5 cases)"},
		{Module11, "signal", []uint64{0, 0, 8, 1024}, "sig: canonical ABI violation: process-signal discriminant 8 out of range (8 cases)"},
		{Module11, "wait", []uint64{0, 0, 0, 1024}, ""}, // a valid call: no trap (no-such-process)
		{Module11, "spawn-persistent", []uint64{3, 1024}, "params of spawn-persistent: canonical ABI violation: tuple<spawn-request, persist-options> pointer 0x3 not aligned to 8"},
		{Module11, "status-many", []uint64{2, 1, 1024}, "ids: canonical ABI violation: list<string> pointer 0x2 not aligned to 4"},
		{Module10, "spawn", []uint64{0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1024}, "request.stdin: canonical ABI violation: option<list<u8>> discriminant 2 out of range"},
	}
	for _, tc := range tests {
		tr := h.invoke(h.ctx, tc.mod, tc.name, tc.stack...)
		switch {
		case tc.want == "" && tr != nil:
			t.Errorf("%s: unexpected trap %v", tc.name, tr)
		case tc.want != "" && (tr == nil || !strings.Contains(tr.Reason, tc.want)):
			t.Errorf("%s: trap %v, want %q", tc.name, tr, tc.want)
		}
	}
}

// TestReallocTraps: a cabi_realloc that returns memory out of bounds or
// misaligned traps the call that needed it.
func TestReallocTraps(t *testing.T) {
	h := newHarness(t, newStubRegistry(t))
	// spawn with an empty cmd gives invalid-input(string) (capability-denied
	// from a stub): either way a string is allocated through realloc.
	req := []cabi.Value{"", []cabi.Value{}, cabi.None, []cabi.Value{}, cabi.None, cabi.None}
	for _, tc := range []struct {
		p    uint32
		want string
	}{
		{1<<22 - 1, "cabi_realloc result for string [0x3fffff,"},
		{0xfffffff0, "cabi_realloc result for string [0xfffffff0,"},
	} {
		stack, _ := h.lower(Module10, "spawn", req)
		h.c.Hook = func(align, size uint32) (uint32, error) { return tc.p, nil }
		tr := h.invoke(h.ctx, Module10, "spawn", stack...)
		h.c.Hook = nil
		if tr == nil || !strings.Contains(tr.Reason, tc.want) {
			t.Errorf("realloc → %#x: trap %v, want %q", tc.p, tr, tc.want)
		}
	}
}

// TestErrorResultBytes checks the raw return area of an error result: the
// result discriminant at +0, the error-code discriminant at the payload
// offset (+8 in 1.1.0, whose torn-write(u64) aligns it to 8; +4 in 1.0.0).
func TestErrorResultBytes(t *testing.T) {
	h := newHarness(t, newStubRegistry(t))
	stack, retptr := h.lower(Module11, "release", "no-such-id")
	if tr := h.invoke(h.ctx, Module11, "release", stack...); tr != nil {
		t.Fatal(tr)
	}
	if m := h.c.Mem.B[retptr:]; m[0] != 1 || m[8] != 10 {
		t.Fatalf("release return area % x, want err + no-such-process(10) at +8", m[:16])
	}
}

package process_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/host/process"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// Tests and benchmarks through the wazero engine with the WAT guest in
// testdata/guest.wat: the host functions as a real guest calls them.

var alice = registry.Caller{Capsule: "abi", Principal: "alice"}

// benchFuncs are the comparison imports of the round-trip benchmark: a
// no-op, and one that lifts a string argument exactly as the process
// functions do.
func benchFuncs() []engine.HostFunc {
	i32 := engine.I32
	return []engine.HostFunc{
		{Module: "bench", Name: "noop", Fn: func(context.Context, engine.Caller, []uint64) {}},
		{Module: "bench", Name: "str", Params: []engine.ValueType{i32, i32}, Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
			if _, err := cabi.LoadString(c.Memory(), uint32(s[0]), uint32(s[1])); err != nil {
				engine.Trapf("%v", err)
			}
		}},
	}
}

type wfix struct {
	reg *registry.Registry
	mod engine.Module
}

func newWazero(t testing.TB) *wfix {
	t.Helper()
	ctx := context.Background()
	b, err := local.New(local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Config{Backends: map[string]sandbox.Backend{"local": b}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Shutdown(ctx) })
	if err := reg.RegisterCapsule("abi", registry.CapsulePolicy{Exec: []string{"/bin/sleep", "/bin/sh"}, AllowPersistent: true, Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	eng, err := wazero.New(ctx, engine.EngineConfig{}, append(process.HostFuncs(reg), benchFuncs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	wasm, err := os.ReadFile("testdata/guest.wasm")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := eng.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	// Import validation input: every process import is one we serve.
	served := map[string]bool{}
	for _, m := range process.Served() {
		served[m] = true
	}
	for _, im := range mod.Imports() {
		if strings.HasPrefix(im.Module, "capsule:process/") && !served[im.Module] {
			t.Fatalf("import %s not served", im.Module)
		}
	}
	return &wfix{reg: reg, mod: mod}
}

func (f *wfix) instance(t testing.TB) (engine.Instance, context.Context, *process.Instance) {
	t.Helper()
	inst, err := f.mod.Instantiate(context.Background(), engine.InstanceConfig{Name: "guest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	pi := process.NewInstance()
	return inst, process.WithInstance(registry.WithCaller(context.Background(), alice), pi), pi
}

// TestWazeroHostileGuest: each hostile act traps its call with a clear
// reason, and the host goes on serving other instances.
func TestWazeroHostileGuest(t *testing.T) {
	f := newWazero(t)
	tests := []struct {
		export string
		mode   uint64
		want   string
	}{
		{"oob_string", 0, "capsule:process/host@1.1.0#status: id: canonical ABI violation: string [0xffff0000, +52) out of bounds"},
		{"bad_utf8", 0, "status: id: canonical ABI violation: string at 0x200 is not valid UTF-8 (first bad byte at offset 2)"},
		{"len_past_memory", 0, "string length 2147483647 exceeds 2^28-1"},
		{"misaligned_retptr", 0, "return pointer 0x401 not aligned to 8"},
		{"retptr_oob", 0, "return area for result<process-info, error-code> [0xfffffff8, +144) out of bounds"},
		{"forged_handle", 0, "#[method]process-handle.os-pid: process-handle (capsule:process/host@1.1.0) handle 77: no such handle"},
		{"null_handle", 0, "handle 0: index 0 is the reserved null handle"},
		{"drop_forged", 0, "#[resource-drop]process-handle: process-handle (capsule:process/host@1.1.0) handle 5: no such handle"},
		{"spawn_empty", 1, "cabi_realloc result for string [0xfffffff0,"},
	}
	for _, tc := range tests {
		inst, ctx, _ := f.instance(t)
		if _, err := inst.Call(ctx, "set_mode", tc.mode); err != nil {
			t.Fatal(err)
		}
		_, err := inst.Call(ctx, tc.export)
		var tr *engine.Trap
		if !errors.As(err, &tr) || !strings.Contains(tr.Reason, tc.want) {
			t.Errorf("%s (mode %d): %v, want trap %q", tc.export, tc.mode, err, tc.want)
		}
		// Another instance is unaffected.
		other, octx, _ := f.instance(t)
		r, err := other.Call(octx, "ok_status")
		if err != nil || r[0] != 110 {
			t.Fatalf("after %s: ok_status = %v, %v (want 110: err, no-such-process)", tc.export, r, err)
		}
	}
}

// TestWazeroDroppedHandle: using a dropped handle and dropping it twice
// trap; the attached process survives both (drop detaches).
func TestWazeroDroppedHandle(t *testing.T) {
	f := newWazero(t)
	_, ctx, _ := f.instance(t)
	id, err := f.reg.SpawnPersistent(ctx, registry.SpawnRequest{Cmd: "/bin/sleep", Args: []string{"30"}}, registry.PersistOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[uint64]string{0: "handle 1: already dropped", 3: "#[resource-drop]process-handle: process-handle (capsule:process/host@1.1.0) handle 1: already dropped"} {
		inst, ctx, pi := f.instance(t)
		inst.Memory().Write(0x300, []byte(id))
		inst.Call(ctx, "set_mode", mode)
		_, err := inst.Call(ctx, "attach_drop_use", 0x300, uint64(len(id)))
		var tr *engine.Trap
		if !errors.As(err, &tr) || !strings.Contains(tr.Reason, want) {
			t.Errorf("mode %d: %v, want trap %q", mode, err, want)
		}
		if pi.Handles() != 0 {
			t.Errorf("mode %d: %d handles left", mode, pi.Handles())
		}
		if info, err := f.reg.Status(ctx, id); err != nil || info.Phase != registry.PhaseRunning {
			t.Fatalf("mode %d: persistent process after detach: phase %v reason %v signal %v err %v", mode, info.Phase, deref(info.Reason), deref(info.Exit.Signal), err)
		}
	}
	f.reg.Stop(ctx, id, nil)
}

// BenchmarkImportRoundTrip measures one guest→host import call, driven by
// a loop inside the guest (b.N iterations per guest call): a no-op import,
// an import lifting a 52-byte string, and the real 1.1.0 `release` with a
// 52-byte ID (registry lookup, then result<_, error-code> stored through
// the return pointer). Goal: str52 ≤ 3× noop.
func BenchmarkImportRoundTrip(b *testing.B) {
	f := newWazero(b)
	for _, export := range []string{"loop_noop", "loop_str", "loop_release"} {
		b.Run(strings.TrimPrefix(export, "loop_"), func(b *testing.B) {
			inst, ctx, _ := f.instance(b)
			b.ReportAllocs()
			b.ResetTimer()
			if _, err := inst.Call(ctx, export, uint64(b.N)); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkAttachStatus: attach(id) + status(id) + [resource-drop] of the
// attached handle, from a warm instance, against a live persistent
// process. Compare with BenchmarkImportRoundTrip/noop in the same run.
func BenchmarkAttachStatus(b *testing.B) {
	f := newWazero(b)
	inst, ctx, _ := f.instance(b)
	id, err := f.reg.SpawnPersistent(ctx, registry.SpawnRequest{Cmd: "/bin/sleep", Args: []string{"60"}}, registry.PersistOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer f.reg.Stop(ctx, id, nil)
	inst.Memory().Write(0x300, []byte(id))
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := inst.Call(ctx, "loop_attach_status", 0x300, uint64(len(id)), uint64(b.N)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReadSince64K: read-since of 64 KiB chunks into guest memory
// (non-draining, from the start of a retained 1 MiB stdout): MB/s.
func BenchmarkReadSince64K(b *testing.B) {
	f := newWazero(b)
	inst, ctx, _ := f.instance(b)
	id, err := f.reg.SpawnPersistent(ctx, registry.SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "head -c 1048576 /dev/zero; exec sleep 60"}}, registry.PersistOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer f.reg.Stop(ctx, id, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch, err := f.reg.ReadSince(ctx, id, registry.Stdout, nil, 65536)
		if err != nil {
			b.Fatal(err)
		}
		if len(ch.Data) == 65536 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d bytes of output", len(ch.Data))
		}
		time.Sleep(10 * time.Millisecond)
	}
	inst.Memory().Write(0x300, []byte(id))
	b.SetBytes(65536)
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := inst.Call(ctx, "loop_read_since", 0x300, uint64(len(id)), uint64(b.N)); err != nil {
		b.Fatal(err)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// BenchmarkImportPair is P2 interleaved: one sample is a guest call
// looping 1000 times over the no-op import, then one over the import
// lifting a 52-byte string, alternating, so both see the same load.
// Reported per import crossing: each side's median and IQR in ns, the
// ratio of the medians (goal ≤ 2×), and the str52 side's allocations per
// import (runtime.MemStats over its samples).
func BenchmarkImportPair(b *testing.B) {
	f := newWazero(b)
	inst, ctx, _ := f.instance(b)
	const per = 1000
	loop := func(export string) func() error {
		return func() error {
			_, err := inst.Call(ctx, export, per)
			return err
		}
	}
	sides := []testutil.Side{{Name: "noop", Run: loop("loop_noop")}, {Name: "str52", Run: loop("loop_str")}}
	times := testutil.Interleave(b, sides, 10)
	for j := range times {
		for i := range times[j] {
			times[j][i] /= per
		}
	}
	med := testutil.ReportSides(b, "ns", sides, times)
	b.ReportMetric(med["str52"]/med["noop"], "str52/noop")
	// Allocations are counted outside the timed samples: ReadMemStats
	// stops the world, and inside a sample it charged tens of µs to the
	// str52 side alone.
	b.StopTimer()
	allocs := testing.AllocsPerRun(5, func() { sides[1].Run() })
	b.ReportMetric(allocs/per, "str52-allocs/import")
}

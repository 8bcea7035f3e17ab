package process

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// These tests drive real processes (sandbox/local) through the host
// functions, with the fake guest memory of the harness.

func newRealRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	b, err := local.New(local.Options{})
	if err != nil {
		t.Fatalf("local backend: %v", err)
	}
	reg, err := registry.New(registry.Config{Backends: map[string]sandbox.Backend{"local": b}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Shutdown(context.Background()) })
	err = reg.RegisterCapsule("abi", registry.CapsulePolicy{
		Exec:            []string{"/bin/sh", "/bin/sleep", "/bin/cat"},
		AllowPersistent: true,
		Backend:         "local",
		Workspace:       t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func request(cmd string, args ...string) []cabi.Value {
	as := make([]cabi.Value, len(args))
	for i, a := range args {
		as[i] = a
	}
	return []cabi.Value{cmd, as, cabi.None, []cabi.Value{[]cabi.Value{"GREETING", "hi"}}, cabi.None, cabi.Some(uint64(20000))}
}

func persistOpts(keepStdin bool) []cabi.Value {
	none := cabi.None
	return []cabi.Value{cabi.Some("abi-test"), keepStdin, uint32(0), none, none, none, none, []cabi.Value{none, none, none, none}}
}

func field(v cabi.Value, i int) cabi.Value { return v.([]cabi.Value)[i] }

func exitCode(t *testing.T, exit cabi.Value) (code, sig int32, hasCode bool) {
	t.Helper()
	c, s := field(exit, 0).(cabi.Variant), field(exit, 1).(cabi.Variant)
	if c.Case == 1 {
		return c.Payload.(int32), 0, true
	}
	if s.Case == 1 {
		return 0, s.Payload.(int32), false
	}
	t.Fatalf("exit-info with neither code nor signal")
	return
}

func alive(pid uint32) bool { return syscall.Kill(int(pid), 0) == nil }

func TestRealSpawnBothVersions(t *testing.T) {
	h := newHarness(t, newRealRegistry(t))
	for _, mod := range Served() {
		r := h.ok(mod, h.call(mod, "spawn", request("/bin/sh", "-c", `echo "$GREETING out"; echo err >&2; exit 3`)))
		if got := bytesOf(field(r, 0)); got != "hi out\n" {
			t.Errorf("%s stdout %q", mod, got)
		}
		if got := bytesOf(field(r, 1)); got != "err\n" {
			t.Errorf("%s stderr %q", mod, got)
		}
		if code, _, ok := exitCode(t, field(r, 2)); !ok || code != 3 {
			t.Errorf("%s exit %v %v", mod, code, ok)
		}
		// Not in exec: capability-denied with a message, in both versions.
		res := h.call(mod, "spawn", request("/bin/echo", "x"))
		if e := h.errName(mod, res); e != "capability-denied" {
			t.Errorf("%s: /bin/echo gave %s", mod, e)
		}
	}
}

// TestRealHandleLifecycle: spawn-background, methods, drop kills, dropped
// and double-dropped handles trap, a 1.1.0 handle is not a 1.0.0 handle.
func TestRealHandleLifecycle(t *testing.T) {
	h := newHarness(t, newRealRegistry(t))
	for _, mod := range Served() {
		idx := h.ok(mod, h.call(mod, "spawn-background", request("/bin/sleep", "30"))).(uint32)
		pid := h.ok(mod, h.call(mod, "[method]process-handle.os-pid", idx)).(uint32)
		if !alive(pid) {
			t.Fatalf("%s: pid %d not alive", mod, pid)
		}
		h.ok(mod, h.call(mod, "[method]process-handle.signal", idx, uint32(0))) // term
		exit := h.ok(mod, h.call(mod, "[method]process-handle.wait", idx, cabi.Some(uint64(5000))))
		if _, sig, ok := exitCode(t, exit); ok || sig != int32(syscall.SIGTERM) {
			t.Errorf("%s: exit after term: sig %d", mod, sig)
		}
		if r := h.trapOf(h.ctx, mod, "[resource-drop]process-handle", idx); r != "" {
			t.Fatalf("%s: drop trapped: %s", mod, r)
		}
		if r := h.trapOf(h.ctx, mod, "[resource-drop]process-handle", idx); !strings.Contains(r, "already dropped") {
			t.Errorf("%s: double drop: %q", mod, r)
		}
		if r := h.trapOf(h.ctx, mod, "[method]process-handle.os-pid", idx); !strings.Contains(r, "already dropped") {
			t.Errorf("%s: use after drop: %q", mod, r)
		}
	}
	// Dropping a running spawn-background handle kills the process.
	idx := h.ok(Module11, h.call(Module11, "spawn-background", request("/bin/sleep", "30"))).(uint32)
	pid := h.ok(Module11, h.call(Module11, "[method]process-handle.os-pid", idx)).(uint32)
	if r := h.trapOf(h.ctx, Module10, "[method]process-handle.os-pid", idx); !strings.Contains(r, "is a process-handle ("+Module11+") handle") {
		t.Errorf("1.1.0 handle used as 1.0.0: %q", r)
	}
	h.call(Module11, "[resource-drop]process-handle", idx)
	waitGone(t, pid)
}

func waitGone(t *testing.T, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRealResetSemantics: Reset reaps spawn-background processes and only
// detaches attached handles; the persistent process survives.
func TestRealResetSemantics(t *testing.T) {
	h := newHarness(t, newRealRegistry(t))
	eph := h.ok(Module10, h.call(Module10, "spawn-background", request("/bin/sleep", "30"))).(uint32)
	ephPid := h.ok(Module10, h.call(Module10, "[method]process-handle.os-pid", eph)).(uint32)
	id := h.ok(Module11, h.call(Module11, "spawn-persistent", request("/bin/sleep", "30"), persistOpts(false))).(string)
	if len(id) != 52 {
		t.Fatalf("id %q", id)
	}
	att := h.ok(Module11, h.call(Module11, "attach", id)).(uint32)
	if att != eph+1 {
		t.Errorf("attach handle %d, want %d", att, eph+1)
	}
	perPid := h.ok(Module11, h.call(Module11, "[method]process-handle.os-pid", att)).(uint32)
	if err := h.inst.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := h.inst.Handles(); n != 0 {
		t.Fatalf("%d handles after reset", n)
	}
	waitGone(t, ephPid)
	if !alive(perPid) {
		t.Fatalf("persistent process died with the instance reset")
	}
	info := h.ok(Module11, h.call(Module11, "status", id))
	if phase := field(info, 4).(uint32); phase != 1 {
		t.Errorf("phase %d, want running", phase)
	}
	// Handle indices start again at 1 after a reset.
	if again := h.ok(Module11, h.call(Module11, "attach", id)).(uint32); again != 1 {
		t.Errorf("first handle after reset = %d", again)
	}
	exit := h.ok(Module11, h.call(Module11, "stop", id, cabi.Some(uint64(100))))
	if _, sig, ok := exitCode(t, exit); ok || sig == 0 {
		t.Errorf("stop exit: %v", exit)
	}
	h.ok(Module11, h.call(Module11, "release", id))
	if e := h.errName(Module11, h.call(Module11, "status", id)); e != "no-such-process" {
		t.Errorf("status after release: %s", e)
	}
}

// TestRealPersistentTier drives every 1.1.0 function of the persistent
// tier once, including spawn-persistent's params-by-pointer convention.
func TestRealPersistentTier(t *testing.T) {
	h := newHarness(t, newRealRegistry(t))
	const m = Module11
	id := h.ok(m, h.call(m, "spawn-persistent", request("/bin/sh", "-c", `while read l; do echo "got $l"; done; echo bye >&2`), persistOpts(true))).(string)
	if n := h.ok(m, h.call(m, "write-stdin", id, []byte("one\n"))).(uint32); n != 4 {
		t.Fatalf("wrote %d", n)
	}
	var out strings.Builder
	cursor := cabi.None
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "got one\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no echo; have %q", out.String())
		}
		ch := h.ok(m, h.call(m, "read-since", id, uint32(0), cursor, uint32(1024)))
		out.Write(field(ch, 0).([]byte))
		cursor = cabi.Some(field(ch, 1).(string))
		time.Sleep(10 * time.Millisecond)
	}
	list := h.ok(m, h.call(m, "list-processes", cabi.Some("abi"))).([]cabi.Value)
	if len(list) != 1 || field(list[0], 0) != id || field(list[0], 1) != "abi-test" {
		t.Fatalf("list %#v", list)
	}
	many := h.ok(m, h.call(m, "status-many", []cabi.Value{id, "bogus"})).([]cabi.Value)
	if len(many) != 1 || !field(many[0], 11).(bool) {
		t.Fatalf("status-many %#v", many)
	}
	h.ok(m, h.call(m, "signal", id, uint32(6))) // cont: harmless
	h.ok(m, h.call(m, "close-stdin", id))
	h.ok(m, h.call(m, "close-stdin", id)) // idempotent
	exit := h.ok(m, h.call(m, "wait", id, uint64(5000)))
	if code, _, ok := exitCode(t, exit); !ok || code != 0 {
		t.Fatalf("exit %v", exit)
	}
	logs := h.ok(m, h.call(m, "read-logs", id))
	if field(logs, 2).(bool) || !strings.Contains(bytesOf(field(logs, 1)), "bye") {
		t.Errorf("read-logs %#v", logs)
	}
	// A malformed cursor is no-such-process; write after close is closed.
	if e := h.errName(m, h.call(m, "read-since", id, uint32(1), cabi.Some("garbage"), uint32(10))); e != "no-such-process" {
		t.Errorf("bad cursor: %s", e)
	}
	if e := h.errName(m, h.call(m, "write-stdin", id, []byte("x"))); e == "" {
		t.Errorf("write after close succeeded")
	}
	batch := h.ok(m, h.call(m, "poll-events", uint64(0), uint32(100), uint64(1000)))
	var sawExit bool
	for _, ev := range field(batch, 0).([]cabi.Value) {
		if field(ev, 1) == id && field(ev, 2).(cabi.Variant).Case == 0 {
			sawExit = true
		}
	}
	if !sawExit {
		t.Errorf("no exited event in %#v", batch)
	}
	h.ok(m, h.call(m, "release", id))
	// Another principal sees no-such-process for the same (now released) and any ID.
	if e := h.errName(m, h.call(m, "stop", id, cabi.None)); e != "no-such-process" {
		t.Errorf("stop after release: %s", e)
	}
}

// TestRealFallbackPrincipal: the owner-fallback principal cannot hold
// persistent processes: persist-unsupported in 1.1.0.
func TestRealFallbackPrincipal(t *testing.T) {
	h := newHarness(t, newRealRegistry(t))
	h.ctx = WithInstance(registry.WithCaller(context.Background(), registry.Caller{Capsule: "abi", Principal: "owner", Fallback: true}), h.inst)
	if e := h.errName(Module11, h.call(Module11, "spawn-persistent", request("/bin/sleep", "1"), persistOpts(false))); e != "persist-unsupported" {
		t.Fatalf("fallback spawn-persistent: %s", e)
	}
}

// TestRealConcurrentInstances: many instances (each its own memory and
// handle table) call the shared host functions at once; run with -race.
func TestRealConcurrentInstances(t *testing.T) {
	reg := newRealRegistry(t)
	done := make(chan error)
	const workers = 6
	for w := 0; w < workers; w++ {
		go func() {
			h := newHarness(t, reg)
			var err error
			defer func() { done <- err }()
			for i := 0; i < 4; i++ {
				r := h.call(Module11, "spawn-background", request("/bin/sleep", "30")).(cabi.Variant)
				if r.Case != 0 {
					continue // quota: 8 concurrent per (capsule, principal), shared
				}
				idx := r.Payload.(uint32)
				h.call(Module11, "[method]process-handle.os-pid", idx)
				h.call(Module10, "spawn", request("/bin/sh", "-c", "exit 0"))
				if i%2 == 0 {
					h.call(Module11, "[resource-drop]process-handle", idx)
				}
			}
			err = h.inst.Reset(context.Background())
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestRealDropThenSpawn: dropping a running spawn-background handle must
// not touch a process started afterwards. (Regression: with the local
// backend's pooled cgroup leaves, the next process was SIGKILLed; passes
// with local.Options{NoCgroups: true}.)
func TestRealDropThenSpawn(t *testing.T) {
	h := newHarness(t, newRealRegistry(t))
	idx := h.ok(Module11, h.call(Module11, "spawn-background", request("/bin/sleep", "30"))).(uint32)
	h.call(Module11, "[resource-drop]process-handle", idx)
	id := h.ok(Module11, h.call(Module11, "spawn-persistent", request("/bin/sleep", "30"), persistOpts(false))).(string)
	time.Sleep(300 * time.Millisecond)
	info := h.ok(Module11, h.call(Module11, "status", id))
	if phase := field(info, 4).(uint32); phase != 1 {
		t.Fatalf("a process started after an unrelated drop is no longer running: phase %d, exit %#v", phase, field(info, 5))
	}
	h.call(Module11, "stop", id, cabi.Some(uint64(100)))
}

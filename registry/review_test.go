package registry

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecListMultiCallBinary: a multi-call binary (busybox) picks its
// applet from argv[0], or from argv[1] when invoked as itself. Allowing one
// applet (a "true" symlink to busybox) must allow only that applet: neither
// another applet's symlink nor the allowed one with an applet name as its
// first argument may run anything else.
func TestExecListMultiCallBinary(t *testing.T) {
	const bb = "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		t.Skipf("SKIPPED LOUDLY: %s is not installed (apt-get install busybox-static): %v", bb, err)
	}
	e := newEnv(t, nil)
	bin := t.TempDir()
	for _, n := range []string{"true", "echo"} {
		if err := os.Symlink(bb, filepath.Join(bin, n)); err != nil {
			t.Fatal(err)
		}
	}
	e.register("mc", func(p *CapsulePolicy) { p.Exec = []string{filepath.Join(bin, "true")} })
	ctx := as("mc", "alice")

	// The allowed applet with another applet's name as argv[1].
	res, err := e.r.Spawn(ctx, SpawnRequest{Cmd: filepath.Join(bin, "true"), Args: []string{"echo", "escaped"}})
	if err != nil {
		t.Fatalf("spawn allowed applet: %v", err)
	}
	if len(res.Stdout) != 0 {
		t.Errorf("allowed %s/true ran another applet: stdout %q", bin, res.Stdout)
	}
	// Another applet's symlink to the same file.
	for _, cmd := range []string{filepath.Join(bin, "echo"), bb} {
		res, err := e.r.Spawn(ctx, SpawnRequest{Cmd: cmd, Args: []string{"escaped"}})
		if !isErr(err, ErrCapabilityDenied) {
			t.Errorf("%s: want capability-denied, got %v (stdout %q)", cmd, err, res.Stdout)
		}
	}
	_ = context.Background
}

// TestEventPushAmortised: once a scope's event log is full every push
// evicts one event; that must not copy the whole retained log each time
// (it runs under the registry lock, once per log-ready of a chatty
// process whose owner does not poll).
func TestEventPushAmortised(t *testing.T) {
	r := &Registry{}
	r.cfg.Defaults.EventRetention = 1024
	sc := &scope{nextSeq: 1, notify: make(chan struct{})}
	for i := 0; i < 4096; i++ {
		r.pushLocked(sc, evRec{ev: Event{Kind: EventStdinDrained}})
	}
	// One allocation per push is the fresh notify channel; the log itself
	// may only reallocate about once per retention's worth of pushes.
	allocs := testing.AllocsPerRun(4096, func() {
		r.pushLocked(sc, evRec{ev: Event{Kind: EventStdinDrained}})
	})
	if allocs > 1.1 {
		t.Errorf("%.2f allocations per push into a full event log, want about 1", allocs)
	}
	if len(sc.events) != 1024 || sc.events[0].ev.Seq != sc.nextSeq-1024 {
		t.Errorf("retained %d events from seq %d, next %d", len(sc.events), sc.events[0].ev.Seq, sc.nextSeq)
	}
}

// TestCwdGuestErrorsAreInvalidInput: every way a guest's cwd can fail to
// name a workspace directory is the guest's error (invalid-input or
// boundary-escape), never the host's (internal).
func TestCwdGuestErrorsAreInvalidInput(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	loop := filepath.Join(e.ws, "cap", "alice", "loop")
	if err := os.MkdirAll(filepath.Dir(loop), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("loop", loop); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cwd string
		want      error
	}{
		{"component too long", strings.Repeat("x", 300), ErrInvalidInput},
		{"path too long", strings.Repeat("a/", 3000), ErrInvalidInput},
		{"symlink loop", "loop", ErrBoundaryEscape},
	} {
		_, err := e.r.Spawn(ctx, SpawnRequest{Cmd: "/bin/true", Cwd: tc.cwd})
		if !isErr(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestForeignHandleCallsIndistinguishable: a handle that reaches another
// caller (one pooled instance serving two principals) answers that caller
// the same whether the owner still holds it or dropped it.
func TestForeignHandleCallsIndistinguishable(t *testing.T) {
	e := newEnv(t, nil)
	alice, bob := as("cap", "alice"), as("cap", "bob")
	live, err := e.r.SpawnBackground(alice, e.sh("sleep 30"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Drop(alice)
	dropped, err := e.r.SpawnBackground(alice, e.sh("sleep 30"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dropped.Drop(alice); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func(h *Handle) error
	}{
		{"read-logs", func(h *Handle) error { _, err := h.ReadLogs(bob); return err }},
		{"write-stdin", func(h *Handle) error { _, err := h.WriteStdin(bob, []byte("x")); return err }},
		{"close-stdin", func(h *Handle) error { return h.CloseStdin(bob) }},
		{"signal", func(h *Handle) error { return h.Signal(bob, SigUsr1) }},
		{"os-pid", func(h *Handle) error { _, err := h.OSPid(bob); return err }},
	} {
		a, b := tc.call(live), tc.call(dropped)
		if a == nil || b == nil || a.Error() != b.Error() || !isErr(a, ErrNoSuchProcess) {
			t.Errorf("%s: live handle gives %v, dropped handle gives %v; want the same no-such-process", tc.name, a, b)
		}
	}
}

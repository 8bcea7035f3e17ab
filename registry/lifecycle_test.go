package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

func reasonOf(t *testing.T, e *env, ctx context.Context, id string) Reason {
	t.Helper()
	e.wait(ctx, id)
	in, err := e.r.Status(ctx, id)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if in.Phase != PhaseExited || in.Reason == nil || in.Exit == nil {
		t.Fatalf("not exited: %+v", in)
	}
	return *in.Reason
}

// The reap ladder, rung by rung, on a fake clock: sweep() is the reaper's
// body, called directly so nothing depends on wall-clock timing.
func TestReapLadder(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	opts := PersistOptions{MaxLifetime: ptr(10 * time.Minute), IdleTimeout: ptr(time.Minute), ExitRetention: ptr(2 * time.Minute)}

	t.Run("idle", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", opts)
		e.clock.Advance(50 * time.Second)
		if _, err := e.r.Status(ctx, id); err != nil { // an owner call refreshes the idle clock
			t.Fatal(err)
		}
		e.clock.Advance(50 * time.Second)
		e.r.sweep()
		if in, _ := e.r.Status(ctx, id); in.Phase != PhaseRunning {
			t.Fatal("reaped although touched")
		}
		e.clock.Advance(61 * time.Second)
		e.r.sweep()
		if r := reasonOf(t, e, ctx, id); r != ReasonIdle {
			t.Fatalf("reason %v", r)
		}
	})
	t.Run("lifetime", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", opts)
		for range 11 {
			e.clock.Advance(55 * time.Second)
			e.r.Status(ctx, id) // keep it from going idle
		}
		e.r.sweep()
		if r := reasonOf(t, e, ctx, id); r != ReasonLifetime {
			t.Fatalf("reason %v", r)
		}
	})
	t.Run("lifetime clamped to host ceiling", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", PersistOptions{MaxLifetime: ptr(100 * time.Hour), IdleTimeout: ptr(100 * time.Hour)})
		e.clock.Advance(6*time.Hour + time.Second)
		e.r.sweep()
		if r := reasonOf(t, e, ctx, id); r != ReasonLifetime {
			t.Fatalf("reason %v", r)
		}
	})
	t.Run("exit retention", func(t *testing.T) {
		id := e.spawn(ctx, "exit 3", opts)
		if ex := e.wait(ctx, id); ex.Code == nil || *ex.Code != 3 {
			t.Fatalf("exit %+v", ex)
		}
		if r := reasonOf(t, e, ctx, id); r != ReasonSelfExit {
			t.Fatalf("reason %v", r)
		}
		e.clock.Advance(time.Minute)
		e.r.sweep()
		if _, err := e.r.Status(ctx, id); err != nil {
			t.Fatal("forgotten before retention passed")
		}
		e.clock.Advance(61 * time.Second)
		e.r.sweep()
		if _, err := e.r.Status(ctx, id); err != ErrNoSuchProcess {
			t.Fatalf("after retention: %v", err)
		}
	})
	t.Run("stop wins over later rungs", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", opts)
		ex, err := e.r.Stop(ctx, id, ptr(time.Second))
		if err != nil || ex.Signal == nil {
			t.Fatalf("stop: %+v %v", ex, err)
		}
		e.clock.Advance(time.Hour)
		e.r.sweep() // lifetime and idle have passed too, and retention as well
		if _, err := e.r.Status(ctx, id); err != ErrNoSuchProcess {
			t.Fatalf("retention after stop: %v", err)
		}
		evs := pollAll(t, e, ctx)
		if ev, ok := exitedEvent(evs, id); !ok || ev.Reason != ReasonStopped {
			t.Fatalf("exited event: %+v", evs)
		}
	})
	t.Run("stop keeps the ID resolvable", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", opts)
		if _, err := e.r.Stop(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
		if r := reasonOf(t, e, ctx, id); r != ReasonStopped {
			t.Fatalf("reason %v", r)
		}
		if err := e.r.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := e.r.Release(ctx, id); err != nil {
			t.Fatalf("release is idempotent for the owner: %v", err)
		}
	})
	t.Run("kill signal", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", opts)
		if err := e.r.Signal(ctx, id, SigKill); err != nil {
			t.Fatal(err)
		}
		if r := reasonOf(t, e, ctx, id); r != ReasonKilled {
			t.Fatalf("reason %v", r)
		}
	})
	t.Run("release while running", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", opts)
		if err := e.r.Release(ctx, id); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("release running: %v", err)
		}
		e.r.Stop(ctx, id, ptr(time.Duration(0)))
	})
	t.Run("evict", func(t *testing.T) {
		bob := as("cap", "bob")
		id := e.spawn(bob, "sleep 100", opts)
		other := e.spawn(ctx, "sleep 100", opts)
		cur := lastSeq(t, e, bob)
		if err := e.r.EvictPrincipal(context.Background(), "bob"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.r.Status(bob, id); err != ErrNoSuchProcess {
			t.Fatalf("evicted: %v", err)
		}
		b, err := e.r.PollEvents(bob, cur, 100, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ev, ok := exitedEvent(b.Events, id); !ok || ev.Reason != ReasonEvicted {
			t.Fatalf("evicted event: %+v", b)
		}
		if in, _ := e.r.Status(ctx, other); in.Phase != PhaseRunning {
			t.Fatal("eviction touched another principal")
		}
		e.r.Stop(ctx, other, ptr(time.Duration(0)))
	})
	if n := e.strays(); n != 0 {
		t.Fatalf("%d stray", n)
	}
}

// Reloading a capsule under the same name keeps its processes and applies
// the new policy to new calls; removing it stops them.
func TestReloadKeepsRemoveStops(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	id := e.spawn(ctx, "sleep 100", PersistOptions{})
	bg, err := e.r.SpawnBackground(ctx, e.sh("sleep 100"))
	if err != nil {
		t.Fatal(err)
	}
	e.register("cap", func(p *CapsulePolicy) { p.AllowPersistent = false }) // upgrade
	if in, err := e.r.Status(ctx, id); err != nil || in.Phase != PhaseRunning {
		t.Fatalf("reload lost the process: %+v %v", in, err)
	}
	if _, err := e.r.SpawnPersistent(ctx, e.sh("true"), PersistOptions{}); !errors.Is(err, ErrPersistUnsupported) {
		t.Fatalf("new policy not applied: %v", err)
	}
	if n := e.strays(); n != 2 {
		t.Fatalf("%d alive after reload, want 2", n)
	}
	if err := e.r.RemoveCapsule(context.Background(), "cap"); err != nil {
		t.Fatal(err)
	}
	if n := e.strays(); n != 0 {
		t.Fatalf("%d alive after remove", n)
	}
	if _, err := e.r.Status(ctx, id); err != ErrNoSuchProcess {
		t.Fatalf("after remove: %v", err)
	}
	if l := e.r.OperatorList(OperatorFilter{}); len(l) != 0 {
		t.Fatalf("operator still sees %d", len(l))
	}
	if err := bg.Drop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Spawn(ctx, e.sh("true")); !errors.Is(err, ErrCapabilityDenied) {
		t.Fatalf("removed capsule still spawns: %v", err)
	}
}

func TestShutdownStopsEverything(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	e.spawn(ctx, "sleep 100", PersistOptions{})
	e.spawn(as("cap", "bob"), "trap '' TERM; sleep 100", PersistOptions{})
	if _, err := e.r.SpawnBackground(ctx, e.sh("sleep 100")); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.strays(); n != 0 {
		t.Fatalf("%d alive after shutdown", n)
	}
	if _, err := e.r.SpawnPersistent(ctx, e.sh("true"), PersistOptions{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after shutdown: %v", err)
	}
}

func TestHandles(t *testing.T) {
	e := newEnv(t, nil)
	alice, bob := as("cap", "alice"), as("cap", "bob")
	id := e.spawn(alice, "read line; echo got:$line; sleep 100", PersistOptions{KeepStdinOpen: true})

	h, err := e.r.Attach(alice, id)
	if err != nil || !h.Attached() {
		t.Fatal(err)
	}
	if _, err := h.Wait(alice, nil); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("attached wait(nil): %v", err)
	}
	// The handle re-checks the caller: another principal on the same
	// instance gets nothing (the peer's #997).
	if _, err := h.Kill(bob); err != ErrNoSuchProcess {
		t.Fatalf("foreign kill through a handle: %v", err)
	}
	if _, err := h.OSPid(bob); err != ErrNoSuchProcess {
		t.Fatalf("foreign os-pid: %v", err)
	}
	if err := h.Drop(bob); err != ErrNoSuchProcess {
		t.Fatalf("foreign drop: %v", err)
	}
	if pid, err := h.OSPid(alice); err != nil || pid == 0 {
		t.Fatalf("os-pid: %v", err)
	}
	if _, err := h.WriteStdin(alice, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	e.readUntil(alice, id, Stdout, "got:hello")
	if err := h.Drop(alice); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReadLogs(alice); !errors.Is(err, ErrClosed) {
		t.Fatalf("use after drop: %v", err)
	}
	if in, _ := e.r.Status(alice, id); in.Phase != PhaseRunning {
		t.Fatal("dropping an attached handle killed the process")
	}

	// An owning handle reaps on drop (instance reset: no caller in ctx).
	bg, err := e.r.SpawnBackground(alice, e.sh("echo bg; sleep 100"))
	if err != nil || bg.Attached() {
		t.Fatal(err)
	}
	before := e.strays()
	if err := bg.Drop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.strays(); n != before-1 {
		t.Fatalf("drop did not reap: %d → %d", before, n)
	}
	// Owning handle wait(nil) is allowed (up to WaitCap) and output comes back.
	bg2, err := e.r.SpawnBackground(alice, e.sh("printf out; printf err >&2; exit 4"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := bg2.WaitWithOutput(alice, nil)
	if err != nil || string(res.Stdout) != "out" || string(res.Stderr) != "err" || *res.Exit.Code != 4 || res.Truncated {
		t.Fatalf("wait-with-output: %+v %v", res, err)
	}
	if _, err := bg2.WriteStdin(alice, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("ephemeral stdin: %v", err)
	}
	if _, err := bg2.OSPid(alice); !errors.Is(err, ErrClosed) {
		t.Fatalf("os-pid after exit: %v", err)
	}
	bg2.Drop(alice)
	// Attached kill is immediate and terminal.
	h2, _ := e.r.Attach(alice, id)
	ex, err := h2.Kill(alice)
	if err != nil || ex.Signal == nil || *ex.Signal != 9 {
		t.Fatalf("kill: %+v %v", ex, err)
	}
	if r := reasonOf(t, e, alice, id); r != ReasonKilled {
		t.Fatalf("reason %v", r)
	}
}

func TestBlockingSpawn(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults.ReadMax = 4096 })
	ctx := as("cap", "alice")
	res, err := e.r.Spawn(ctx, SpawnRequest{Cmd: "/bin/cat", Stdin: []byte("in\x00\xff"), HasStdin: true})
	if err != nil || string(res.Stdout) != "in\x00\xff" || *res.Exit.Code != 0 || res.Truncated {
		t.Fatalf("%+v %v", res, err)
	}
	// Timeout: the tree is killed and the partial output comes back.
	res, err = e.r.Spawn(ctx, SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo partial; sleep 100 & sleep 100"}, Env: []EnvVar{{markerKey, e.marker}}, Timeout: ptr(300 * time.Millisecond)})
	if err != nil || res.Exit.Signal == nil || string(res.Stdout) != "partial\n" {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	if n := e.strays(); n != 0 {
		t.Fatalf("%d stray after timeout", n)
	}
	// Output beyond ReadMax is reported as truncated, never silently cut.
	res, err = e.r.Spawn(ctx, SpawnRequest{Cmd: "/usr/bin/head", Args: []string{"-c", "10000", "/dev/zero"}})
	if err != nil || len(res.Stdout) != 4096 || !res.Truncated {
		t.Fatalf("truncation: len=%d truncated=%v %v", len(res.Stdout), res.Truncated, err)
	}
}

func TestInfo(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	id := e.spawn(ctx, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo done; sleep 100", PersistOptions{Label: ptr("busy loop"), KeepStdinOpen: true})
	e.readUntil(ctx, id, Stdout, "done")
	e.clock.Advance(3 * time.Second)
	in, err := e.r.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != id || in.Label != "busy loop" || in.Command != "/bin/sh" || in.Phase != PhaseRunning || in.OSPid == nil ||
		in.Exit != nil || in.Reason != nil || !in.StdinOpen || in.Age != 3*time.Second || in.Idle != 3*time.Second || in.BufferedBytes != 5 {
		t.Fatalf("running info: %+v", in)
	}
	if in.Capsule != "" || in.Principal != "" {
		t.Fatal("owner view leaks operator fields")
	}
	if (in.CPU != nil && *in.CPU == 0) || (in.MemPeak != nil && *in.MemPeak == 0) {
		t.Fatalf("made-up zero: cpu=%v mem=%v", in.CPU, in.MemPeak)
	}
	if in.CPU == nil || in.MemPeak == nil {
		t.Logf("NOTE: the backend cannot measure every figure on this machine (cpu=%v mem=%v): Info carries none for it, never a zero", in.CPU, in.MemPeak)
	}
	if l, _ := e.r.List(ctx, ptr("busy")); len(l) != 1 {
		t.Fatalf("label filter: %d", len(l))
	}
	if l, _ := e.r.List(ctx, ptr("nope")); len(l) != 0 {
		t.Fatalf("label filter: %d", len(l))
	}
	op, err := e.r.OperatorStatus(id)
	if err != nil || op.Capsule != "cap" || op.Principal != "alice" {
		t.Fatalf("operator: %+v %v", op, err)
	}
	if l := e.r.OperatorList(OperatorFilter{Principal: "alice"}); len(l) != 1 {
		t.Fatalf("operator list: %d", len(l))
	}
	if c, err := e.r.OperatorReadSince(id, Stdout, nil, 100); err != nil || string(c.Data) != "done\n" {
		t.Fatalf("operator read: %q %v", c.Data, err)
	}
	if _, err := e.r.OperatorStop(context.Background(), id, nil); err != nil {
		t.Fatal(err)
	}
	in, _ = e.r.Status(ctx, id)
	if in.Phase != PhaseExited || in.OSPid != nil || in.StdinOpen || *in.Reason != ReasonStopped {
		t.Fatalf("exited info: %+v", in)
	}
}

// gatedBackend is the real local backend with a gate in Start, to land a
// removal exactly between the quota reservation and the process start.
type gatedBackend struct {
	sandbox.Backend
	entered chan struct{}
	release chan struct{}
}

func (g *gatedBackend) Start(ctx context.Context, s sandbox.ProcessSpec) (sandbox.Handle, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Backend.Start(ctx, s)
}

func TestRemovedWhileStarting(t *testing.T) {
	be, _ := backends(t)
	g := &gatedBackend{Backend: be, entered: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, func(c *Config) { c.Backends["gated"] = g })
	for _, how := range []string{"remove", "evict"} {
		e.register("gcap", func(p *CapsulePolicy) { p.Backend = "gated"; p.Quotas.MaxConcurrent = 1 })
		ctx := as("gcap", "alice")
		errc := make(chan error)
		go func() {
			_, err := e.r.SpawnPersistent(ctx, e.sh("sleep 100"), PersistOptions{})
			errc <- err
		}()
		<-g.entered
		if how == "remove" {
			e.r.RemoveCapsule(context.Background(), "gcap")
		} else {
			e.r.EvictPrincipal(context.Background(), "alice")
		}
		close(g.release)
		if err := <-errc; !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: spawn finished with %v", how, err)
		}
		if n := e.strays(); n != 0 {
			t.Fatalf("%s: %d stray", how, n)
		}
		g.release = make(chan struct{})
		// The reservation was returned: the cap of 1 is free again.
		e.register("gcap", func(p *CapsulePolicy) { p.Backend = "local"; p.Quotas.MaxConcurrent = 1 })
		id := e.spawn(ctx, "true", PersistOptions{})
		e.wait(ctx, id)
		e.r.Release(ctx, id)
	}
}

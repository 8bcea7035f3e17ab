package registry

import (
	"testing"
	"time"
)

// TestAdoptRearmsReapDeadlines: reap deadlines are journaled as absolute
// times (the idle one moved by owner calls), so a restart re-arms them
// with the downtime counting. On the registry's clock: four processes
// spawned at 0 s, an owner call at 5 s, a daemon from 5 s to 20 s with
// none in between. The two whose deadline passed while no daemon ran (idle
// 10 s, lifetime 10 s) are reaped at the first sweep after adoption, each
// with its own reason; the two with time left (lifetime 30 s; idle 30 s
// from the call at 5 s) report exactly that time left and are not reaped
// a second early, then are reaped at their deadlines.
func TestAdoptRearmsReapDeadlines(t *testing.T) {
	daemon, dctx := keeperDaemons(t, "regrearm-")
	sec := func(n int) *time.Duration { d := time.Duration(n) * time.Second; return &d }
	ctx := as("cap", "alice")
	e1, jr1 := daemon()
	idleGone := e1.spawn(ctx, "exec sleep 60", PersistOptions{IdleTimeout: sec(10)})
	lifeGone := e1.spawn(ctx, "exec sleep 60", PersistOptions{MaxLifetime: sec(10)})
	lifeLeft := e1.spawn(ctx, "exec sleep 60", PersistOptions{MaxLifetime: sec(30)})
	idleLeft := e1.spawn(ctx, "exec sleep 60", PersistOptions{IdleTimeout: sec(30)})
	e1.clock.Advance(5 * time.Second)
	if _, err := e1.r.Status(ctx, idleLeft); err != nil { // an owner call: idle deadline 35 s, journaled
		t.Fatal(err)
	}
	if err := e1.r.Detach(dctx); err != nil {
		t.Fatal(err)
	}
	jr1.Close()

	e2, jr2 := daemon()
	defer jr2.Close()
	e2.clock.Advance(20 * time.Second) // 15 s with no daemon
	rep, err := e2.r.Adopt(dctx)
	if err != nil || rep.Running != 4 {
		t.Fatalf("adopt: %+v %v, want 4 running", rep, err)
	}
	// Read through the operator's view: an owner call would move the idle deadline.
	reapIn := func(id string) (time.Duration, Reason) {
		t.Helper()
		in, err := e2.r.OperatorStatus(id)
		if err != nil || in.Phase == PhaseExited || in.Reason != nil || in.ReapIn == nil {
			t.Fatalf("status: %+v %v; want it running, unclaimed, with a reap deadline", in, err)
		}
		return *in.ReapIn, *in.ReapRule
	}
	if left, rule := reapIn(lifeLeft); left != 10*time.Second || rule != ReasonLifetime {
		t.Fatalf("lifetime 30 s, adopted at 20 s: reaped in %v by %v, want 10 s by lifetime", left, rule)
	}
	if left, rule := reapIn(idleLeft); left != 15*time.Second || rule != ReasonIdle {
		t.Fatalf("idle 30 s from 5 s, adopted at 20 s: reaped in %v by %v, want 15 s by idle", left, rule)
	}
	e2.r.sweep()
	e2.awaitReaped(idleGone, ReasonIdle)
	e2.awaitReaped(lifeGone, ReasonLifetime)
	for _, step := range []struct {
		by                 time.Duration
		reaped, stillThere string
		reason             Reason
	}{
		{9 * time.Second, "", lifeLeft, 0},                    // 29 s
		{1 * time.Second, lifeLeft, idleLeft, ReasonLifetime}, // 30 s
		{4 * time.Second, "", idleLeft, 0},                    // 34 s
		{1 * time.Second, idleLeft, "", ReasonIdle},           // 35 s
	} {
		e2.clock.Advance(step.by)
		e2.r.sweep()
		if step.reaped != "" {
			e2.awaitReaped(step.reaped, step.reason)
		}
		if step.stillThere != "" {
			reapIn(step.stillThere) // running, not claimed
		}
	}
}

// awaitReaped polls (bounded) until the reaper's termination of id has
// ended it, and checks the reason it recorded and the SIGTERM exit.
func (e *env) awaitReaped(id string, want Reason) {
	e.t.Helper()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		in, err := e.r.OperatorStatus(id)
		if err != nil {
			e.t.Fatalf("status: %v", err)
		}
		if in.Phase == PhaseExited {
			if in.Reason == nil || *in.Reason != want || in.Exit == nil || in.Exit.Signal == nil || *in.Exit.Signal != 15 {
				e.t.Fatalf("reaped: reason %v exit %+v, want %v and signal 15", in.Reason, in.Exit, want)
			}
			return
		}
		if in.Reason != nil && *in.Reason != want {
			e.t.Fatalf("claimed for %v, want %v", *in.Reason, want)
		}
		if time.Now().After(end) {
			e.t.Fatalf("not reaped within 20 s (phase %v, reason %v), want reaped for %v", in.Phase, in.Reason, want)
		}
	}
}

package registry

import (
	"testing"
	"time"
)

// process-info's reap deadline names the rule that will end the process,
// on the fake clock (exact figures): the idle timeout while it comes
// first, max lifetime once that is nearer (or is from the start), none
// once exited (exit retention then only forgets the record: the WIT's
// reap-rule is an exit reason, and there is no process left to end). Each
// named rule is then the reason the sweep records.
func TestReapDeadlineRule(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	type want struct {
		in   time.Duration
		rule Reason
	}
	check := func(t *testing.T, what string, in Info, w *want) {
		t.Helper()
		switch {
		case w == nil && (in.ReapIn != nil || in.ReapRule != nil):
			t.Errorf("%s: reap in %v by %v, want none", what, deref(in.ReapIn), deref(in.ReapRule))
		case w != nil && (in.ReapIn == nil || in.ReapRule == nil):
			t.Errorf("%s: no reap deadline (%v, %v), want %v by %v", what, in.ReapIn, in.ReapRule, w.in, w.rule)
		case w != nil && (*in.ReapIn != w.in || *in.ReapRule != w.rule):
			t.Errorf("%s: reap in %v by %v, want %v by %v", what, *in.ReapIn, *in.ReapRule, w.in, w.rule)
		}
	}
	status := func(t *testing.T, id string) Info {
		t.Helper()
		in, err := e.r.Status(ctx, id) // an owner call: restarts the idle clock
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	operator := func(t *testing.T, id string) Info {
		t.Helper()
		in, err := e.r.OperatorStatus(id) // the operator's view: touches nothing
		if err != nil {
			t.Fatal(err)
		}
		return in
	}

	t.Run("idle timeout first", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", PersistOptions{MaxLifetime: ptr(10 * time.Minute), IdleTimeout: ptr(time.Minute)})
		check(t, "at the start", status(t, id), &want{time.Minute, ReasonIdle})
		e.clock.Advance(20 * time.Second)
		check(t, "20 s later, operator view", operator(t, id), &want{40 * time.Second, ReasonIdle})
		check(t, "an owner call", status(t, id), &want{time.Minute, ReasonIdle})
		e.clock.Advance(70 * time.Second)
		check(t, "past the deadline, before the sweep", operator(t, id), &want{0, ReasonIdle})
		e.r.sweep()
		if r := reasonOf(t, e, ctx, id); r != ReasonIdle {
			t.Errorf("reaped by %v, the named rule was idle", r)
		}
	})
	t.Run("max lifetime first", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", PersistOptions{MaxLifetime: ptr(time.Minute), IdleTimeout: ptr(10 * time.Minute)})
		check(t, "at the start", status(t, id), &want{time.Minute, ReasonLifetime})
		e.clock.Advance(20 * time.Second)
		check(t, "20 s later (an owner call does not extend a lifetime)", status(t, id), &want{40 * time.Second, ReasonLifetime})
		e.clock.Advance(41 * time.Second)
		check(t, "past the deadline", operator(t, id), &want{0, ReasonLifetime})
		e.r.sweep()
		if r := reasonOf(t, e, ctx, id); r != ReasonLifetime {
			t.Errorf("reaped by %v, the named rule was lifetime", r)
		}
	})
	t.Run("lifetime overtakes a touched idle clock", func(t *testing.T) {
		id := e.spawn(ctx, "sleep 100", PersistOptions{MaxLifetime: ptr(5 * time.Minute), IdleTimeout: ptr(time.Minute)})
		for range 4 {
			e.clock.Advance(50 * time.Second)
			check(t, "kept busy", status(t, id), &want{time.Minute, ReasonIdle})
		}
		e.clock.Advance(50 * time.Second) // 250 s: 50 s of lifetime left, a full minute of idle
		check(t, "the lifetime nearer", status(t, id), &want{50 * time.Second, ReasonLifetime})
		e.clock.Advance(50 * time.Second)
		e.r.sweep()
		if r := reasonOf(t, e, ctx, id); r != ReasonLifetime {
			t.Errorf("reaped by %v, the named rule was lifetime", r)
		}
	})
	t.Run("exited, in exit retention", func(t *testing.T) {
		id := e.spawn(ctx, "exit 0", PersistOptions{MaxLifetime: ptr(10 * time.Minute), IdleTimeout: ptr(time.Minute), ExitRetention: ptr(2 * time.Minute)})
		e.wait(ctx, id)
		check(t, "exited", status(t, id), nil)
		e.clock.Advance(90 * time.Second) // past the idle timeout, within retention
		e.r.sweep()
		in := operator(t, id)
		check(t, "exited, idle timeout passed", in, nil)
		if in.Reason == nil || *in.Reason != ReasonSelfExit {
			t.Errorf("exit reason %v, want self-exit (no reap rule applies to an exited process)", deref(in.Reason))
		}
		e.clock.Advance(31 * time.Second)
		e.r.sweep()
		if _, err := e.r.Status(ctx, id); err != ErrNoSuchProcess {
			t.Errorf("after exit retention: %v, want no such process", err)
		}
	})
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

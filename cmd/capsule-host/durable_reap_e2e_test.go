//go:build !leanclient

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// reapVictim is one process of TestDurableReapRearm with its reap rule.
type reapVictim struct {
	name   string
	opt    string // idle_timeout_ms or max_lifetime_ms
	limit  time.Duration
	reason string // the reason its reap records
	id     string
	// sent and answered bracket its spawn: the daemon's clock started its
	// deadline between the two.
	sent, answered time.Time
}

// TestDurableReapRearm: reap deadlines survive a kill -9 as absolute
// times, so the downtime counts. Four persistent processes on the built
// binary (testcap, local backend): an idle timeout and a max lifetime
// whose deadlines pass while no daemon runs are reaped right after the
// next serve adopts them, each with its own reason; a max lifetime and an
// idle timeout with time left report, once adopted, a time to their reap
// within what their spawn's bracket allows, and are reaped at their
// deadlines, not before. Every one's age (and idle time) after the
// restart is the time since its spawn, downtime included. Every wait is polled and bounded; the only
// timing the test relies on is that the kill follows the short ones'
// spawns by less than their 5 s (checked, not assumed).
func TestDurableReapRearm(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf("bundled = false\ncapsules = [%q]\n[backends]\nenabled = [\"local\"]\n", capsuleCopy(t, "testcap"))
	if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("reaprearm-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	d1 := startServe(t, bin, dir)
	awaitServing(t, c, d1)
	const short, long = 5 * time.Second, 20 * time.Second
	vs := []*reapVictim{ // the long ones first: the kill follows the short ones
		{name: "lifetime with time left", opt: "max_lifetime_ms", limit: long, reason: "lifetime"},
		{name: "idle with time left", opt: "idle_timeout_ms", limit: long, reason: "idle"},
		{name: "lifetime passed meanwhile", opt: "max_lifetime_ms", limit: short, reason: "lifetime"},
		{name: "idle passed meanwhile", opt: "idle_timeout_ms", limit: short, reason: "idle"},
	}
	for _, v := range vs {
		req := map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "sleep 1000; : " + mark}}
		v.sent = time.Now()
		m, code := capsuleCall(t, c, "testcap", "alice", "spawn_persistent",
			map[string]any{"request": req, "options": map[string]any{v.opt: v.limit.Milliseconds()}})
		v.answered = time.Now()
		v.id, _ = m["ok"].(string)
		if code != "" || v.id == "" {
			t.Fatalf("%s: spawn: %q %v", v.name, code, m)
		}
	}
	d1.cmd.Process.Signal(syscall.SIGKILL)
	<-d1.exited
	if down := time.Now(); down.After(vs[2].sent.Add(short)) {
		t.Skipf("SKIP LOUDLY: the kill came %v after the short spawns (machine too loaded): their deadlines passed while a daemon ran", down.Sub(vs[2].sent))
	}
	time.Sleep(short + time.Second) // no daemon: the short deadlines pass

	d2 := startServe(t, bin, dir, "--on-shutdown", "stop")
	awaitServing(t, c, d2)
	ready := time.Now()
	for _, v := range vs {
		checkAdoptedClock(t, c, v)
	}
	for _, v := range vs[2:] { // reaped at the first sweep after adoption
		awaitReapedE2E(t, c, v, ready.Add(20*time.Second))
	}
	for _, v := range vs[:2] {
		awaitReapedE2E(t, c, v, v.answered.Add(v.limit+30*time.Second))
	}
	endServe(t, d2)
	waitNoMarked(t, mark, 30*time.Second)
}

// checkAdoptedClock: an adopted process's age (and, with no owner call
// since its spawn, its idle time) is the time since its spawn, downtime
// included, within the brackets of the spawn and of this query (whatever
// the machine's speed); one with time left is running, and its time to
// reap is its limit less that age.
func checkAdoptedClock(t *testing.T, c *api.Client, v *reapVictim) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := time.Now()
	p, err := c.Process(ctx, v.id)
	after := time.Now()
	if err != nil {
		t.Fatalf("%s: %v", v.name, err)
	}
	lo, hi := before.Sub(v.answered)-time.Millisecond, after.Sub(v.sent)+time.Millisecond // ms rounding
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	if age := ms(p.AgeMS); age < lo || age > hi {
		t.Fatalf("%s: age %v after the restart, want within [%v, %v]: the downtime must count, and only it", v.name, age, lo, hi)
	}
	if idle := ms(p.IdleMS); v.reason == "idle" && (idle < lo || idle > hi) {
		t.Fatalf("%s: idle %v after the restart, want within [%v, %v]", v.name, idle, lo, hi)
	}
	if v.limit < 10*time.Second {
		return // the deadline passed meanwhile: awaitReapedE2E checks its reap
	}
	if after.After(v.sent.Add(v.limit)) {
		t.Logf("%s: adopted after its deadline (a slow restart): its reap is checked, not its time left", v.name)
		return
	}
	if p.Phase == "exited" || p.ReapInMS == nil || p.ReapRule != v.reason {
		t.Fatalf("%s, adopted with time left: %+v; want it running, reaped by %s", v.name, p, v.reason)
	}
	if in := ms(*p.ReapInMS); in < v.limit-hi || in > v.limit-lo {
		t.Fatalf("%s: reaped in %v after the restart, want within [%v, %v]", v.name, in, v.limit-hi, v.limit-lo)
	}
}

// awaitReapedE2E polls the operator's view (which does not count as the
// owner's use) until the process is reaped, by until: its reason and
// SIGTERM exit, and never before its deadline (the earliest the daemon
// can have started it is v.sent).
func awaitReapedE2E(t *testing.T, c *api.Client, v *reapVictim, until time.Time) {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, err := c.Process(ctx, v.id)
		seen := time.Now()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		if p.Phase == "exited" {
			if p.Reason != v.reason || p.Exit == nil || p.Exit.Signal == nil || *p.Exit.Signal != 15 {
				t.Fatalf("%s: reaped with reason %q exit %+v, want %s and signal 15", v.name, p.Reason, p.Exit, v.reason)
			}
			if seen.Before(v.sent.Add(v.limit)) {
				t.Fatalf("%s: reaped %v after its spawn was sent, before its %v", v.name, seen.Sub(v.sent), v.limit)
			}
			return
		}
		if time.Now().After(until) {
			t.Fatalf("%s: still %s (reap in %v ms by %s), want reaped for %s", v.name, p.Phase, p.ReapInMS, p.ReapRule, v.reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

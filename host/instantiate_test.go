package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
)

// A guest whose _initialize never returns must not hang the host: every
// instantiation (at load, on a call, by the warmer) is bounded by
// Config.InstantiateTimeout, so Load fails with a clear error instead of
// blocking forever.
func TestSpinningInitializeIsBounded(t *testing.T) {
	e := newHost(t, func(c *host.Config) {
		c.CallTimeout = 200 * time.Millisecond
		c.InstantiateTimeout = 300 * time.Millisecond
	})
	dir := capsuleDir(t, "spininit", "testdata/spininit/spininit.wasm", "")
	done := make(chan error, 1)
	go func() {
		_, err := e.h.Load(context.Background(), dir)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, host.ErrDescribe) && !errors.Is(err, host.ErrInstance) {
			t.Fatalf("Load: %v", err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Load error does not say the deadline passed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Load of a guest with a spinning _initialize hangs (no deadline on instantiation)")
	}
}

// sleepers counts running "sleep 3071" processes (started by spawninit).
func sleepers(t *testing.T) int {
	t.Helper()
	ms, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err == nil && string(b) == "sleep\x003071\x00" {
			n++
		}
	}
	return n
}

// An instance enters the pool with no live handles, even one created by
// the warmer whose _initialize spawned a background process: that handle
// is dropped (and its process reaped) once instantiation is over, not left
// running while the instance idles, or forever if it is evicted unused.
func TestInstanceEntersPoolWithoutHandles(t *testing.T) {
	if sleepers(t) != 0 {
		t.Skip("SKIPPED: a stray `sleep 3071` is already running on this machine")
	}
	e := newHost(t, nil)
	dir := capsuleDir(t, "spawninit", "testdata/spawninit/spawninit.wasm",
		"[imports]\n\"capsule:process\" = \"1.0\"\n[capabilities]\nexec = [\"/bin/sh\"]\n[pool]\nmin_idle = 3\nmax = 3\n")
	c, err := e.h.Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.Stats().Idle == 3 })
	deadline := time.Now().Add(5 * time.Second)
	for sleepers(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes spawned by _initialize still run while their instances idle in the pool", sleepers(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPoolClosedWhileInstantiating: a call reserves an instance slot and
// starts making an instance (slowinit's _initialize takes seconds), the
// capsule is removed meanwhile (its pool closes with that reservation
// live), then the call's deadline interrupts the instantiation. The call
// is a timeout, and the closed pool still drains: before, the failed
// reservation was given back without finishing the pool, and Host.Close
// waited for it forever (a component-form hammer with reloads hung so).
func TestPoolClosedWhileInstantiating(t *testing.T) {
	e := newHost(t, func(c *host.Config) {
		c.CallTimeout = 60 * time.Second
		c.InstantiateTimeout = 120 * time.Second // the load's own instance takes seconds
	})
	ctx := context.Background()
	c, err := e.h.Load(ctx, capsuleDir(t, "slowinit", "testdata/slowinit/slowinit.wasm", "[pool]\nmin_idle = 0\nmax = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	pctx := host.WithPrincipal(ctx, "alice")
	// Discard the load's instance, so that the next call makes one.
	if _, err := e.h.Call(pctx, "slowinit", "trap", "{}"); !errors.Is(err, host.ErrTrap) {
		t.Fatalf("trap: %v", err)
	}
	callCtx, cancel := context.WithTimeout(pctx, 1500*time.Millisecond) // under the 2 s of _initialize
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := e.h.Call(callCtx, "slowinit", "noop", "{}"); done <- err }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st := c.Stats(); st.Live == 1 && st.Busy == 1 {
			break // the call holds a reservation and is instantiating
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call never started an instance: %+v", c.Stats())
		}
	}
	if err := e.h.Remove(ctx, "slowinit"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, host.ErrTimeout) {
			t.Fatalf("a call whose deadline passed while its instance was being made: %v, want a timeout", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the call did not end at its deadline")
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	start := time.Now()
	e.h.Close(cctx)
	if cctx.Err() != nil {
		t.Fatalf("Host.Close waited %v for the closed pool: it never drained", time.Since(start).Round(time.Millisecond))
	}
}

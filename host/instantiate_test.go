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

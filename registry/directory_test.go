package registry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestLocalDirectoryCap: the single-node directory's reservation is
// atomic: 100 concurrent against a cap of 8 give exactly 8.
func TestLocalDirectoryCap(t *testing.T) {
	d := NewLocalDirectory()
	s := DirScope{Capsule: "cap", Principal: "p"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, quota := 0, 0
	for range 100 {
		wg.Go(func() {
			err := d.Reserve(context.Background(), DirReservation{Scope: s, Persistent: true, MaxConcurrent: 8, MaxRetained: 32})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else if errors.Is(err, ErrQuota) {
				quota++
			} else {
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 8 || quota != 92 {
		t.Fatalf("ok=%d quota=%d, want 8/92", ok, quota)
	}
	if h := d.Holding(s); h != (DirHolding{Running: 8, Retained: 8}) {
		t.Fatalf("holding %+v", h)
	}
}

// TestDirectoryFollowsLifecycle: what the registry holds in its directory
// follows spawn, exit, release, and a run-to-completion spawn returns
// everything it took.
func TestDirectoryFollowsLifecycle(t *testing.T) {
	d := NewLocalDirectory()
	e := newEnv(t, func(c *Config) { c.Directory = d })
	ctx := as("cap", "alice")
	s := DirScope{Capsule: "cap", Principal: "alice"}
	id := e.spawn(ctx, "exec sleep 60", PersistOptions{})
	if h := d.Holding(s); h != (DirHolding{Running: 1, Retained: 1}) {
		t.Fatalf("after spawn %+v", h)
	}
	if _, err := d.Lookup(ctx, e.r.dirKeyOf(id)); err != nil {
		t.Fatalf("record after spawn: %v", err)
	}
	if _, err := e.r.Stop(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.Holding(s).Running != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("running slot not returned after stop: %+v", d.Holding(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.r.Release(ctx, id); err != nil {
		t.Fatal(err)
	}
	if h := d.Holding(s); h != (DirHolding{}) {
		t.Fatalf("after release %+v", h)
	}
	if _, err := d.Lookup(ctx, e.r.dirKeyOf(id)); !errors.Is(err, ErrNoSuchProcess) {
		t.Fatalf("record after release: %v", err)
	}
	if _, err := e.r.Spawn(ctx, e.sh("true")); err != nil {
		t.Fatal(err)
	}
	if h := d.Holding(s); h != (DirHolding{}) {
		t.Fatalf("after run-to-completion %+v", h)
	}
}

// refusing is a directory that refuses every reservation as unreachable.
type refusing struct{ *LocalDirectory }

func (refusing) Reserve(context.Context, DirReservation) error {
	return ErrUnavailable
}

// TestDirectoryRefusalUndoes: a reservation the directory refuses leaves
// nothing taken locally and nothing started.
func TestDirectoryRefusalUndoes(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Directory = refusing{NewLocalDirectory()} })
	ctx := as("cap", "alice")
	for range 20 { // more than the local cap: each refusal returned its local slot
		if _, err := e.r.SpawnPersistent(ctx, e.sh("exec sleep 60"), PersistOptions{}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("spawn: %v, want unavailable", err)
		}
	}
	if n := e.strays(); n != 0 {
		t.Fatalf("%d processes started", n)
	}
	e.r.mu.Lock()
	sc := e.r.scopes[owner{capsule: "cap", principal: "alice"}]
	run, ret := sc.running, sc.retained
	e.r.mu.Unlock()
	if run != 0 || ret != 0 {
		t.Fatalf("local counters %d/%d after refusals", run, ret)
	}
}

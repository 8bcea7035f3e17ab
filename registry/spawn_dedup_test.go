package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSpawnDedup: a repeat of a key gets the first attempt's ID without
// running (also while the first runs); a failed first attempt is run
// again; entries expire after keep; a full memory evicts the oldest and
// counts it; another caller with the same request ID is another key.
func TestSpawnDedup(t *testing.T) {
	ctx := context.Background()
	d := newSpawnDedup()
	d.max = 3
	t0 := time.Unix(1000, 0)
	var runs atomic.Int32
	ok := func(id string) func() (string, error) {
		return func() (string, error) { runs.Add(1); return id, nil }
	}
	k := dedupKey{node: "a", req: "r1", caller: Caller{Capsule: "cap", Principal: "alice"}}

	release := make(chan struct{})
	var wg sync.WaitGroup
	var got [4]string
	wg.Go(func() {
		got[0], _, _ = d.do(ctx, k, t0, func() (string, error) { runs.Add(1); <-release; return "id1", nil })
	})
	for deadline := time.Now().Add(10 * time.Second); runs.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first attempt never started")
		}
	}
	for i := 1; i < 4; i++ {
		wg.Go(func() { got[i], _, _ = d.do(ctx, k, t0, ok("other")) })
	}
	close(release)
	wg.Wait()
	if runs.Load() != 1 || got != [4]string{"id1", "id1", "id1", "id1"} {
		t.Fatalf("runs %d, answers %v; want one run, id1 everywhere", runs.Load(), got)
	}

	mallory := k
	mallory.caller.Principal = "mallory"
	if id, _, _ := d.do(ctx, mallory, t0, ok("m1")); id != "m1" {
		t.Fatalf("another caller with the same request ID got %q", id)
	}
	fail := dedupKey{node: "a", req: "r2", caller: k.caller}
	if _, _, err := d.do(ctx, fail, t0, func() (string, error) { return "", ErrQuota }); !errors.Is(err, ErrQuota) {
		t.Fatalf("failed attempt: %v", err)
	}
	if id, _, err := d.do(ctx, fail, t0, ok("r2id")); id != "r2id" || err != nil {
		t.Fatalf("repeat of a failed attempt: %q %v, want it run again", id, err)
	}
	if size, hits, ev := d.stats(); size != 3 || hits != 3 || ev != 0 {
		t.Fatalf("stats %d %d %d, want 3 entries, 3 hits, 0 evicted", size, hits, ev)
	}
	// Full: a fourth key evicts the oldest (k), counted.
	if _, ev, _ := d.do(ctx, dedupKey{node: "b", req: "r3"}, t0, ok("x")); ev != 1 {
		t.Fatalf("evicted %d on a full memory, want 1", ev)
	}
	if id, _, _ := d.do(ctx, k, t0, ok("again")); id != "again" {
		t.Fatalf("an evicted key answered %q from memory", id)
	}
	// Expiry: all older than keep are gone, without counting as evictions.
	later := t0.Add(dedupKeep)
	for i := range 3 {
		d.do(ctx, dedupKey{node: "c", req: fmt.Sprint(i)}, later, ok("y"))
	}
	if size, _, ev := d.stats(); size != 3 || ev != 2 {
		t.Fatalf("after expiry: %d entries, %d evicted; want 3 and 2", size, ev)
	}
}

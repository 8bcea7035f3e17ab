package host

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pollGate waits (bounded) until cond holds.
func pollGate(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestShareGateFIFO: a principal's waiters get freed units in the order
// they queued, so none can lose race after race (the starvation
// TestProcessHammer hit under load); another principal is not queued
// behind them.
func TestShareGateFIFO(t *testing.T) {
	g := newShareGate(4, 1)
	ctx := context.Background()
	if err := g.enter(ctx, "eve", nil); err != nil {
		t.Fatal(err)
	}
	const n = 6
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.enter(ctx, "eve", nil); err != nil {
				t.Error(err)
				return
			}
			order <- i
		}()
		pollGate(t, "waiter queued", func() bool { return g.waiting("eve") == i+1 })
	}
	if err := g.enter(ctx, "alice", nil); err != nil { // her own share: not behind eve's queue
		t.Fatal(err)
	}
	g.leave("alice")
	for want := range n {
		g.leave("eve")
		if got := <-order; got != want {
			t.Fatalf("unit %d went to waiter %d, want %d (FIFO)", want, got, want)
		}
	}
	g.leave("eve")
	wg.Wait()
	if len(g.held) != 0 || len(g.queue) != 0 {
		t.Fatalf("after every leave: held %v, queue %v", g.held, g.queue)
	}
}

// TestShareGateGiveUp: a waiter whose deadline passes, or whose pool
// closes, leaves the queue with the error, and a unit handed to it as it
// gives up goes on to the next waiter instead of being lost.
func TestShareGateGiveUp(t *testing.T) {
	g := newShareGate(2, 1)
	bg := context.Background()
	if err := g.enter(bg, "p", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if err := g.enter(ctx, "p", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("enter past its deadline: %v", err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- g.enter(bg, "p", stop) }()
	pollGate(t, "waiter queued", func() bool { return g.waiting("p") == 1 })
	close(stop)
	if err := <-done; !errors.Is(err, errPoolClosed) {
		t.Fatalf("enter of a closed pool: %v", err)
	}
	if g.waiting("p") != 0 {
		t.Fatal("a waiter that gave up is still queued")
	}
	g.leave("p")
	if len(g.held) != 0 {
		t.Fatalf("held after the last leave: %v", g.held)
	}
}

// TestShareGateHammer: many callers of a few principals enter and leave
// with random deadlines, some passing while queued (the hand-over race):
// no principal ever holds more than its share, and at the end nothing is
// held or queued.
func TestShareGateHammer(t *testing.T) {
	const share, workers, rounds = 2, 48, 300
	g := newShareGate(8, share)
	inside := map[string]*atomic.Int32{"a": {}, "b": {}, "c": {}}
	keys := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := keys[w%len(keys)]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Microsecond)
				err := g.enter(ctx, key, nil)
				cancel()
				if err != nil {
					continue
				}
				if n := inside[key].Add(1); n > share {
					t.Errorf("%s: %d callers inside, share %d", key, n, share)
				}
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
				}
				inside[key].Add(-1)
				g.leave(key)
			}
		}()
	}
	wg.Wait()
	if len(g.held) != 0 || len(g.queue) != 0 {
		t.Fatalf("after the hammer: held %v, queue %v", g.held, g.queue)
	}
}

package host

import (
	"context"
	"sync"
)

// shareGate is the pool's fairness between principals (RFC §4, "Why a
// FIFO pool?"): a caller first takes one of its principal's share units,
// then a pool slot (the tokens semaphore). A principal's callers beyond
// its share wait here, on their own principal, not in the slot queue; so
// the slot queue holds at most share callers per principal, and a
// principal that floods the pool delays another's call by at most its
// share of calls, never by its whole backlog. With share < max, another
// principal always finds a slot no flood can hold.
//
// Within a principal the gate is FIFO: a freed unit is handed to the
// oldest waiter, never raced for. (It used to wake every waiter to race
// for it: under load one unlucky caller lost race after race and waited
// out a 30 s deadline while the principal's later callers were served,
// TestProcessHammer's "no free instance".)
type shareGate struct {
	share int

	mu    sync.Mutex
	held  map[string]int             // units held per principal
	queue map[string][]chan struct{} // waiters per principal, oldest first; closed = unit handed over
}

func newShareGate(max, share int) *shareGate {
	if share <= 0 {
		share = (max + 1) / 2
	}
	return &shareGate{share: min(share, max), held: map[string]int{}, queue: map[string][]chan struct{}{}}
}

// enter takes a unit of key's share, waiting in key's queue until ctx
// ends or stop closes (errPoolClosed).
func (g *shareGate) enter(ctx context.Context, key string, stop <-chan struct{}) error {
	g.mu.Lock()
	if g.held[key] < g.share && len(g.queue[key]) == 0 {
		g.held[key]++
		g.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	g.queue[key] = append(g.queue[key], w)
	g.mu.Unlock()
	var err error
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = errPoolClosed
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-w: // handed over while giving up: pass it on
		g.releaseLocked(key)
	default:
		g.dequeueLocked(key, w)
	}
	return err
}

// leave gives key's unit back: to its oldest waiter, if any.
func (g *shareGate) leave(key string) {
	g.mu.Lock()
	g.releaseLocked(key)
	g.mu.Unlock()
}

// releaseLocked hands one of key's units to its oldest waiter (the held
// count stays), or frees it.
func (g *shareGate) releaseLocked(key string) {
	if q := g.queue[key]; len(q) > 0 {
		close(q[0])
		g.setQueueLocked(key, q[1:])
		return
	}
	if g.held[key]--; g.held[key] <= 0 {
		delete(g.held, key)
	}
}

// dequeueLocked removes waiter w, which gave up before a unit reached it.
func (g *shareGate) dequeueLocked(key string, w chan struct{}) {
	q := g.queue[key]
	for i, x := range q {
		if x == w {
			g.setQueueLocked(key, append(q[:i:i], q[i+1:]...))
			return
		}
	}
}

func (g *shareGate) setQueueLocked(key string, q []chan struct{}) {
	if len(q) == 0 {
		delete(g.queue, key)
		return
	}
	g.queue[key] = q
}

// waiting is the number of key's callers queued at the gate (tests).
func (g *shareGate) waiting(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue[key])
}

// shareKey is who a pool slot is charged to: the call's principal,
// or "" for the capsule's owner-fallback (describe, calls without one).
func shareKey(ctx context.Context) string {
	p, _ := PrincipalFrom(ctx)
	return p
}

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
type shareGate struct {
	share int

	mu   sync.Mutex
	held map[string]int           // units held per principal
	wake map[string]chan struct{} // closed when that principal's unit frees
}

func newShareGate(max, share int) *shareGate {
	if share <= 0 {
		share = (max + 1) / 2
	}
	return &shareGate{share: min(share, max), held: map[string]int{}, wake: map[string]chan struct{}{}}
}

// enter takes a unit of key's share, waiting until ctx ends or stop
// closes (errPoolClosed).
func (g *shareGate) enter(ctx context.Context, key string, stop <-chan struct{}) error {
	for {
		g.mu.Lock()
		if g.held[key] < g.share {
			g.held[key]++
			g.mu.Unlock()
			return nil
		}
		ch := g.wake[key]
		if ch == nil {
			ch = make(chan struct{})
			g.wake[key] = ch
		}
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return errPoolClosed
		}
	}
}

// leave gives key's unit back and wakes its waiters.
func (g *shareGate) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[key]--; g.held[key] <= 0 {
		delete(g.held, key)
	}
	if ch := g.wake[key]; ch != nil {
		close(ch)
		delete(g.wake, key)
	}
}

// shareKey is who a pool slot is charged to: the call's principal,
// or "" for the capsule's owner-fallback (describe, calls without one).
func shareKey(ctx context.Context) string {
	p, _ := PrincipalFrom(ctx)
	return p
}

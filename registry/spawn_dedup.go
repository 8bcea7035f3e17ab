package registry

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Idempotent forwarded spawns. A placed spawn (placement.go) whose answer
// is lost after the request left the caller may have started a process on
// the target. The caller therefore retries the same node with the same
// request ID, and the target answers a repeat from its memory of
// (calling node, request ID, caller) instead of starting a second
// process. Only successes are remembered: a failed spawn started nothing,
// so a repeat may run it again.

const (
	// dedupKeep is how long a forwarded spawn's answer is remembered:
	// well over the caller's retry window (placeRetryFor).
	dedupKeep = 2 * time.Minute
	// dedupMax bounds the memory (≈ 16k × ~200 B). Past it the oldest
	// entry is evicted early and counted: a repeat of that spawn within
	// dedupKeep would start a second process.
	dedupMax = 16384
)

// AnswerLostError is a forwarded call that may have reached node but
// whose answer did not come back (the connection failed after it was
// obtained, or the answer was unreadable). Unlike HeldElsewhereError
// (nothing was sent) the call may have run there.
type AnswerLostError struct {
	Node  string
	Cause error
}

func (e *AnswerLostError) Error() string {
	return fmt.Sprintf("the answer of node %q was lost (the call may have run there): %v", e.Node, e.Cause)
}

func (e *AnswerLostError) Unwrap() error { return ErrUnavailable }

type dedupKey struct {
	node, req string
	caller    Caller
}

type dedupEntry struct {
	done chan struct{} // closed when the first attempt ended
	id   string        // its ID; "" when it failed (the entry is then gone)
	at   time.Time
}

// spawnDedup remembers forwarded spawns' IDs, bounded by max entries of
// at most keep age (oldest first out).
type spawnDedup struct {
	keep time.Duration
	max  int

	mu      sync.Mutex
	m       map[dedupKey]*dedupEntry
	order   []dedupKey // insertion order (entries' at ascending)
	evicted uint64     // entries dropped before keep: counted loss of the guarantee
	hits    uint64
}

func newSpawnDedup() *spawnDedup {
	return &spawnDedup{keep: dedupKeep, max: dedupMax, m: map[dedupKey]*dedupEntry{}}
}

// do runs spawn once per key: a repeat while the first runs waits for it
// (bounded by ctx) and gets its ID; a repeat after a success gets the ID
// without running anything. evicted reports an entry dropped early by
// this call (for the log).
func (d *spawnDedup) do(ctx context.Context, k dedupKey, now time.Time, spawn func() (string, error)) (id string, evicted uint64, err error) {
	for {
		d.mu.Lock()
		d.expire(now)
		e, ok := d.m[k]
		if !ok {
			evicted = d.makeRoom()
			e = &dedupEntry{done: make(chan struct{}), at: now}
			d.m[k] = e
			d.order = append(d.order, k)
			d.mu.Unlock()
			id, err := spawn()
			d.mu.Lock()
			if err != nil && d.m[k] == e {
				delete(d.m, k) // its slot in order is skipped by expire/makeRoom
			}
			e.id = id
			close(e.done)
			d.mu.Unlock()
			return id, evicted, err
		}
		d.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return "", 0, fmt.Errorf("%w: waiting for the same forwarded spawn: %v", ErrCancelled, ctx.Err())
		}
		if e.id != "" {
			d.mu.Lock()
			d.hits++
			d.mu.Unlock()
			return e.id, 0, nil
		}
		// The first attempt failed and started nothing: run it again.
	}
}

// expire drops entries older than keep from the front (under mu).
func (d *spawnDedup) expire(now time.Time) {
	for len(d.order) > 0 {
		k := d.order[0]
		e, ok := d.m[k]
		if ok && now.Sub(e.at) < d.keep {
			return
		}
		if ok {
			select {
			case <-e.done:
			default:
				return // still running: kept until it ends
			}
			delete(d.m, k)
		}
		d.order = d.order[1:]
	}
}

// makeRoom evicts the oldest entries while the memory is full (under mu),
// counting them.
func (d *spawnDedup) makeRoom() uint64 {
	var n uint64
	for len(d.m) >= d.max && len(d.order) > 0 {
		k := d.order[0]
		d.order = d.order[1:]
		if _, ok := d.m[k]; ok {
			delete(d.m, k)
			n++
		}
	}
	d.evicted += n
	return n
}

// stats is (entries, repeats answered from memory, early evictions).
func (d *spawnDedup) stats() (size int, hits, evicted uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m), d.hits, d.evicted
}

// SpawnDedupStats reports the forwarded-spawn memory: its size, the
// repeats it answered (lost answers retried), and the entries evicted
// before their time (each a repeat that would have started a second
// process).
func (r *Registry) SpawnDedupStats() (size int, hits, evicted uint64) {
	return r.dedup.stats()
}

// spawnForwarded runs a placed spawn another node sent here, once per
// (calling node, request ID, caller). It is detached from the call's
// cancellation: a caller that lost the connection retries and must find
// the outcome, not a half-run spawn.
func (r *Registry) spawnForwarded(ctx context.Context, call RemoteCall) (string, error) {
	run := func() (string, error) {
		return r.SpawnPersistent(context.WithoutCancel(ctx), *call.Spawn, *call.Persist)
	}
	if call.Request == "" || call.From == "" {
		return run()
	}
	k := dedupKey{node: call.From, req: call.Request, caller: call.Caller}
	id, ev, err := r.dedup.do(ctx, k, r.now(), run)
	if ev > 0 {
		_, _, total := r.dedup.stats()
		r.log.Warn("forwarded-spawn memory full: evicted entries before their time (a retry of those spawns could start a second process)", "evicted", ev, "evicted_total", total)
	}
	return id, err
}

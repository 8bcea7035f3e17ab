package registry

import (
	"context"
	"fmt"
	"time"
)

// pushLocked appends an event to a scope's log, evicting the oldest beyond
// retention, and wakes pollers.
func (r *Registry) pushLocked(sc *scope, e evRec) {
	r.reserveSeqLocked(sc)
	e.ev.Seq = sc.nextSeq
	sc.nextSeq++
	sc.events = append(sc.events, e)
	if over := len(sc.events) - r.cfg.Defaults.EventRetention; over > 0 {
		for _, old := range sc.events[:over] {
			r.consumedLocked(old)
		}
		// Reslice, not copy: a full log evicts on every push, and a copy
		// of the whole retention per event is O(retention) work under the
		// registry lock. append moves the live tail to a fresh array only
		// when the old one is used up (amortised O(1)); clear drops the
		// evicted records' process pointers meanwhile.
		clear(sc.events[:over])
		sc.events = sc.events[over:]
	}
	close(sc.notify)
	sc.notify = make(chan struct{})
}

// consumedLocked notes that an event left the log (delivered or evicted):
// a consumed log-ready lets the watcher coalesce the next one.
func (r *Registry) consumedLocked(e evRec) {
	if e.ev.Kind != EventLogReady || e.p == nil {
		return
	}
	s := e.ev.Stream
	if e.p.pending[s] && e.p.pendingSeq[s] == e.ev.Seq {
		e.p.pending[s] = false
		e.p.rearmWatch(r)
	}
}

// emitLogReady pushes a log-ready event unless one is already pending for
// that stream (coalescing). It reports whether it pushed.
func (r *Registry) emitLogReady(p *proc, s Stream) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.pending[s] || p.forgotten {
		return false
	}
	p.pending[s] = true
	r.reserveSeqLocked(p.sc) // the seq read next is the one pushLocked uses
	p.pendingSeq[s] = p.sc.nextSeq
	r.pushLocked(p.sc, evRec{ev: Event{ID: p.id, Kind: EventLogReady, Stream: s}, p: p})
	return true
}

func (r *Registry) emitStdinDrained(p *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !p.forgotten {
		r.pushLocked(p.sc, evRec{ev: Event{ID: p.id, Kind: EventStdinDrained}, p: p})
	}
}

// PollEvents returns the caller's events after cursor (0: the oldest
// retained), blocking until one arrives or timeout (capped by WaitCap)
// passes. An empty batch is not an error.
func (r *Registry) PollEvents(ctx context.Context, cursor uint64, max uint32, timeout time.Duration) (EventBatch, error) {
	o, err := r.caller(ctx)
	if err != nil {
		return EventBatch{}, err
	}
	if max == 0 {
		return EventBatch{}, fmt.Errorf("%w: poll-events: max must be > 0", ErrInvalidInput)
	}
	n := min(int(max), maxEventBatch)
	timeout = max0(min(timeout, r.cfg.Defaults.WaitCap))
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	relay := r.relaying(ctx)
	var tick <-chan time.Time
	if relay {
		t := time.NewTicker(relayEvery)
		defer t.Stop()
		tick = t.C
	}
	var missed uint64
	for {
		if relay {
			missed += r.pullRemote(ctx, o)
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return EventBatch{}, fmt.Errorf("%w: registry is shut down", ErrUnavailable)
		}
		sc := r.scopeLocked(o)
		last := sc.nextSeq - 1
		if cursor > last {
			r.mu.Unlock()
			return EventBatch{}, fmt.Errorf("%w: poll-events: cursor %d is ahead of the event log (last %d)", ErrInvalidInput, cursor, last)
		}
		first := sc.nextSeq - uint64(len(sc.events)) // seq of the oldest retained
		b := EventBatch{Next: cursor}
		if cursor+1 < first {
			b.Missed = first - (cursor + 1)
			b.Next = first - 1
		}
		for _, e := range sc.events {
			if e.ev.Seq <= cursor {
				continue
			}
			if len(b.Events) == n {
				break
			}
			b.Events = append(b.Events, e.ev)
			b.Next = e.ev.Seq
			r.consumedLocked(e)
		}
		notify := sc.notify
		r.mu.Unlock()
		b.Missed += missed
		if len(b.Events) > 0 || b.Missed > 0 {
			return b, nil
		}
		select {
		case <-notify:
		case <-tick:
		case <-timer.C:
			return b, nil
		case <-ctx.Done():
			if ctx.Err() == context.Canceled {
				return EventBatch{}, fmt.Errorf("%w: poll-events", ErrCancelled)
			}
			return b, nil
		}
	}
}

func max0(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

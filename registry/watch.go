package registry

import (
	"sync"

	"github.com/capsule-host/capsule-host/sandbox"
)

// A process is watched for output (coalesced log-ready events) and for its
// exit in one of two ways. A handle that can call back (sandbox.Watchable:
// keeper-held processes, nearly every persistent one) reports its changes
// to one short-lived drain goroutine per registry, so a live process
// costs no goroutine; any other handle gets watch, a goroutine parked on
// its channels for its lifetime. Both emit the same events (RFC §16, "Why
// no goroutine per process").

// cbWatch is a callback-watched process's state.
type cbWatch struct {
	mu     sync.Mutex
	st     sandbox.WatchState // the newest state reported
	queued bool               // in the registry's watch queue
	stop   func()             // ends the handle's callbacks
	ended  bool               // finishWatch ran (stop is called by whoever comes last)

	// checkMu serialises the checks (drain and finishWatch) and guards
	// seen; taken before Registry.mu, never under it.
	checkMu   sync.Mutex
	seen      [2]int64 // End at the last log-ready pushed, per stream
	finishing bool
}

// watchQueue holds the processes whose handle reported a change, served
// by one drain goroutine that runs only while the queue is not empty.
type watchQueue struct {
	mu      sync.Mutex
	q       []watched
	running bool
}

type watched struct {
	p  *proc
	cb *cbWatch
}

// startWatch starts watching p, which was just published (the caller
// counted it in r.workers; the watch's end calls Done).
func (r *Registry) startWatch(p *proc) {
	if w, ok := p.h.(sandbox.Watchable); ok {
		cb := &cbWatch{}
		r.mu.Lock()
		p.cb = cb
		r.mu.Unlock()
		stop, ok := w.Watch(func(st sandbox.WatchState) { r.noteWatch(p, cb, st) })
		if ok {
			cb.mu.Lock()
			ended := cb.ended
			if !ended {
				cb.stop = stop
			}
			cb.mu.Unlock()
			if ended {
				stop()
			}
			r.enqueueWatch(p, cb) // the first check, as watch's
			return
		}
		r.mu.Lock()
		p.cb = nil // no callback was made
		r.mu.Unlock()
	}
	go r.watch(p)
}

// noteWatch takes a state the handle reported and queues p for a check.
func (r *Registry) noteWatch(p *proc, cb *cbWatch, st sandbox.WatchState) {
	cb.mu.Lock()
	merge := func(have *sandbox.StreamState, got sandbox.StreamState) {
		have.End = max(have.End, got.End)
		have.Closed = have.Closed || got.Closed
	}
	merge(&cb.st.Stdout, st.Stdout)
	merge(&cb.st.Stderr, st.Stderr)
	cb.st.Done = cb.st.Done || st.Done
	cb.mu.Unlock()
	r.enqueueWatch(p, cb)
}

// rearmWatch wakes p's watch after its log-ready was consumed, so that
// output that came meanwhile gets the next one. Under r.mu.
func (p *proc) rearmWatch(r *Registry) {
	if p.cb != nil {
		r.enqueueWatch(p, p.cb)
		return
	}
	select {
	case p.rearm <- struct{}{}:
	default:
	}
}

// enqueueWatch queues p once, starting the drain if none runs. It may be
// called under r.mu.
func (r *Registry) enqueueWatch(p *proc, cb *cbWatch) {
	cb.mu.Lock()
	if cb.queued {
		cb.mu.Unlock()
		return
	}
	cb.queued = true
	cb.mu.Unlock()
	r.wq.mu.Lock()
	r.wq.q = append(r.wq.q, watched{p, cb})
	start := !r.wq.running
	r.wq.running = true
	r.wq.mu.Unlock()
	if start {
		go r.drainWatch()
	}
}

// drainWatch checks queued processes until the queue is empty.
func (r *Registry) drainWatch() {
	for {
		r.wq.mu.Lock()
		if len(r.wq.q) == 0 {
			r.wq.running = false
			r.wq.q = nil
			r.wq.mu.Unlock()
			return
		}
		w := r.wq.q[0]
		r.wq.q[0] = watched{}
		r.wq.q = r.wq.q[1:]
		r.wq.mu.Unlock()
		r.checkWatch(w.p, w.cb)
	}
}

// checkWatch is one check of a callback-watched process: a log-ready
// for each stream that moved past its last one (unless one is pending:
// coalesced, its consumption queues p again), and, once the handle
// settled, the exit on its own goroutine.
func (r *Registry) checkWatch(p *proc, cb *cbWatch) {
	cb.mu.Lock()
	cb.queued = false
	st := cb.st
	cb.mu.Unlock()
	cb.checkMu.Lock()
	if cb.finishing {
		cb.checkMu.Unlock()
		return
	}
	if p.persistent {
		cb.logReady(r, p, Stdout, st.Stdout.End)
		cb.logReady(r, p, Stderr, st.Stderr.End)
	}
	fin := st.Done
	cb.finishing = fin
	cb.checkMu.Unlock()
	if fin {
		go r.finishWatch(p, cb)
	}
}

// logReady pushes a log-ready for stream s if it moved past the last
// one. Under cb.checkMu.
func (cb *cbWatch) logReady(r *Registry, p *proc, s Stream, end int64) {
	if end > cb.seen[s] && r.emitLogReady(p, s) {
		cb.seen[s] = end
	}
}

// finishWatch ends a callback watch as watch ends: the streams' final
// state read from the logs themselves (the feed's may lag), then the
// exit recorded.
func (r *Registry) finishWatch(p *proc, cb *cbWatch) {
	defer r.workers.Done()
	cb.mu.Lock()
	stop := cb.stop
	cb.ended = true
	cb.mu.Unlock()
	if stop != nil {
		stop()
	}
	if p.persistent {
		cb.checkMu.Lock()
		cb.logReady(r, p, Stdout, p.log(Stdout).End())
		cb.logReady(r, p, Stderr, p.log(Stderr).End())
		cb.checkMu.Unlock()
	}
	r.recordExit(p)
}

// watch is a process's one goroutine: it turns output into coalesced
// log-ready events and records the exit.
func (r *Registry) watch(p *proc) {
	defer r.workers.Done()
	var ch [2]<-chan struct{}
	var seen [2]int64
	check := func(s Stream) {
		l := p.log(s)
		ch[s] = l.Changed() // arm before reading End: no lost wake-up
		if l.Closed() {
			ch[s] = nil // a closed log's channel stays closed: never spin on it
		}
		if end := l.End(); end > seen[s] && r.emitLogReady(p, s) {
			seen[s] = end
			ch[s] = nil // coalesced: re-armed when the event is consumed
		}
	}
	if p.persistent {
		check(Stdout)
		check(Stderr)
	}
	for {
		select {
		case <-p.h.Done():
			if p.persistent {
				check(Stdout)
				check(Stderr)
			}
			r.recordExit(p)
			return
		case <-ch[Stdout]:
			check(Stdout)
		case <-ch[Stderr]:
			check(Stderr)
		case <-p.rearm:
			for _, s := range []Stream{Stdout, Stderr} {
				if ch[s] == nil {
					check(s)
				}
			}
		}
	}
}

package keeper

import (
	"context"
	"errors"
	"sync"

	"github.com/capsule-host/capsule-host/sandbox"
)

// hub is a Client's side of the feed (feed.go): one watch_all in flight
// per connection, whose answers wake the RemoteLogs waiting for a stream
// to move and the handles waiting for an exit. It starts with the first
// waiter. Against a keeper without watch_all it reports unsupported and
// the callers fall back to one watch or wait each.
type hub struct {
	c *Client

	mu          sync.Mutex
	started     bool
	ready       bool  // the first answer (a full snapshot) arrived
	unsupported bool  // the keeper has no watch_all
	failed      error // the loop ended (the connection did)
	state       map[string]procChange
	logs        map[string][]*logWaiter
	exits       map[string][]func(*procChange)
	procs       map[string][]*procWatcher // Watch callbacks, by ref
}

// procWatcher is one Watch of a handle: called with every change the feed
// reports for its process (watch.go).
type procWatcher struct {
	h *handle
	f func(sandbox.WatchState)
}

type logWaiter struct {
	r    *RemoteLog
	seen int64 // the End the waiter saw; it fires when End passes it
	ch   chan struct{}
}

// fires says whether a stream in state st wakes a waiter that saw End seen.
func (w *logWaiter) fires(pc procChange) bool {
	st := pc.Stdout
	if w.r.stream == Stderr {
		st = pc.Stderr
	}
	return st.End > w.seen || st.Closed
}

// waitLog arranges for ch to be closed when r's stream moves past seen
// (or the connection ends). False: the keeper has no feed; the caller
// parks a watch instead. The caller holds r.mu, so a wake-up that is due
// at once is delivered on a goroutine.
func (h *hub) waitLog(r *RemoteLog, seen int64, ch chan struct{}) bool {
	h.mu.Lock()
	if h.unsupported {
		h.mu.Unlock()
		return false
	}
	w := &logWaiter{r: r, seen: seen, ch: ch}
	pc, known := h.state[r.ref.ID]
	switch {
	case h.failed != nil:
		h.mu.Unlock()
		go r.fire(ch, nil)
		return true
	case h.ready && known && w.fires(pc):
		h.mu.Unlock()
		go r.fire(ch, &pc)
		return true
	}
	if h.logs == nil {
		h.logs = map[string][]*logWaiter{}
	}
	h.logs[r.ref.ID] = append(h.logs[r.ref.ID], w)
	h.startLocked()
	h.mu.Unlock()
	return true
}

// onExit arranges for f to be called once the process ref exited or was
// removed, or the connection ended: with the feed's state of the process
// when that reports the exit (Exit set: the caller settles without a
// round trip), else with nil (gone, the connection ended, or a keeper
// whose feed carries no exit), and the caller asks the keeper (wait).
// f runs on the feed's goroutine: it must not block. registered false
// means f was not registered: the feed is unsupported or failed (known
// nil), or the process already exited (known is its state).
//
// A process the feed has not reported yet (just started, or attached
// before the first answer) is waited for: the keeper notes a start
// before it answers it, so its state is on the way. Only a process
// removed before this connection followed the feed would never be
// reported; nobody attaches to one (the registry forgets a process
// before it removes it).
func (h *hub) onExit(ref string, f func(*procChange)) (registered bool, known *procChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unsupported || h.failed != nil {
		return false, nil
	}
	if pc, ok := h.state[ref]; h.ready && ok && pc.Exited {
		return false, &pc
	}
	if h.exits == nil {
		h.exits = map[string][]func(*procChange){}
	}
	h.exits[ref] = append(h.exits[ref], f)
	h.startLocked()
	return true, nil
}

func (h *hub) startLocked() {
	if !h.started {
		h.started = true
		go h.run()
	}
}

// run is the one long poll. It ends with the connection.
func (h *hub) run() {
	var since uint64
	for {
		var res watchAllResult
		err := h.c.call(context.Background(), opWatchAll, watchAllArgs{Since: since}, &res)
		if err != nil {
			h.end(err, since == 0 && errors.Is(err, ErrProtocol) && h.c.failure() == nil)
			return
		}
		h.apply(res)
		since = res.Gen
	}
}

// apply takes one answer and wakes whom it concerns. A full snapshot
// wakes every waiter of a process it does not list (a removal it cannot
// report, or a start it raced): a spurious wake-up, after which the
// waiter reads the keeper and either learns the error or waits again.
func (h *hub) apply(res watchAllResult) {
	h.mu.Lock()
	if res.Full || h.state == nil {
		h.state = make(map[string]procChange, len(res.Procs))
	}
	type logFire struct {
		w  *logWaiter
		pc *procChange
	}
	type exitFire struct {
		f  func(*procChange)
		pc *procChange
	}
	var logFires []logFire
	var exitFires []exitFire
	touched := map[string]bool{}
	for _, pc := range res.Procs {
		touched[pc.Ref] = true
		if pc.Gone {
			delete(h.state, pc.Ref)
		} else {
			h.state[pc.Ref] = pc
		}
	}
	for ref, ws := range h.logs {
		pc, known := h.state[ref]
		if !touched[ref] && !(res.Full && !known) {
			continue
		}
		keep := ws[:0]
		for _, w := range ws {
			switch {
			case !known:
				logFires = append(logFires, logFire{w, nil})
			case w.fires(pc):
				p := pc
				logFires = append(logFires, logFire{w, &p})
			default:
				keep = append(keep, w)
			}
		}
		if len(keep) == 0 {
			delete(h.logs, ref)
		} else {
			h.logs[ref] = keep
		}
	}
	for ref, fs := range h.exits {
		pc, known := h.state[ref]
		if (touched[ref] || res.Full) && (!known || pc.Exited) {
			var at *procChange
			if known {
				at = &pc
			}
			for _, f := range fs {
				exitFires = append(exitFires, exitFire{f, at})
			}
			delete(h.exits, ref)
		}
	}
	watchFires := h.watchFiresLocked(res, touched)
	h.ready = true
	h.mu.Unlock()
	for _, f := range logFires {
		f.w.r.fire(f.w.ch, f.pc)
	}
	for _, f := range watchFires {
		f.w.fire(f.pc)
	}
	for _, f := range exitFires {
		f.f(f.pc)
	}
}

// end wakes every waiter for good: the connection ended (each then meets
// ErrKeeperGone on its next call), or the keeper has no feed.
func (h *hub) end(err error, unsupported bool) {
	h.mu.Lock()
	h.failed, h.unsupported = err, unsupported
	logs, exits, procs := h.logs, h.exits, h.procs
	h.logs, h.exits, h.procs = nil, nil, nil
	h.mu.Unlock()
	for _, ws := range procs {
		for _, w := range ws {
			w.fire(nil) // spurious: the handle's Done follows
		}
	}
	for _, ws := range logs {
		for _, w := range ws {
			w.r.fire(w.ch, nil)
		}
	}
	for _, fs := range exits {
		for _, f := range fs {
			f(nil)
		}
	}
}

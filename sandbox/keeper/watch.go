package keeper

import (
	"slices"

	"github.com/capsule-host/capsule-host/sandbox"
)

// Watch is sandbox.Watchable: the feed that already follows every process
// of the connection (hub.go) calls f with each change of this one, and
// settle calls it once the handle settled, so the registry parks no
// goroutine per live process (RFC §16). Against a keeper without the feed
// it reports !ok and the caller waits on the channels.
func (h *handle) Watch(f func(sandbox.WatchState)) (stop func(), ok bool) {
	w := &procWatcher{h: h, f: f}
	hub := &h.logs[0].c.hub
	if !hub.watchProc(h.ref.ID, w) {
		return nil, false
	}
	h.wmu.Lock()
	h.watchers = append(h.watchers, w)
	h.wmu.Unlock()
	select {
	case <-h.done: // settled before the watcher was in place
		w.fire(nil)
	default:
	}
	return func() {
		hub.unwatchProc(h.ref.ID, w)
		h.wmu.Lock()
		h.watchers = slices.DeleteFunc(h.watchers, func(x *procWatcher) bool { return x == w })
		h.wmu.Unlock()
	}, true
}

// fire calls the watcher with the feed's state of its process (nil: none
// new; the logs' last known state is reported), and Done if the handle
// settled.
func (w *procWatcher) fire(pc *procChange) {
	if pc != nil {
		w.h.logs[0].note(pc.Stdout, nil)
		w.h.logs[1].note(pc.Stderr, nil)
	}
	st := sandbox.WatchState{Stdout: w.h.logs[0].known(), Stderr: w.h.logs[1].known()}
	select {
	case <-w.h.done:
		st.Done = true
	default:
	}
	w.f(st)
}

// notifyWatchers tells every Watch of h that it settled.
func (h *handle) notifyWatchers() {
	h.wmu.Lock()
	ws := slices.Clone(h.watchers)
	h.wmu.Unlock()
	for _, w := range ws {
		w.fire(nil)
	}
}

// known is the stream's last state this RemoteLog saw, without a round
// trip.
func (r *RemoteLog) known() sandbox.StreamState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sandbox.StreamState{End: r.state.End, Closed: r.state.Closed}
}

// watchProc registers w for every change the feed reports of ref. False:
// the keeper has no feed. A change already known (or a feed already
// ended) is delivered at once.
func (h *hub) watchProc(ref string, w *procWatcher) bool {
	h.mu.Lock()
	if h.unsupported {
		h.mu.Unlock()
		return false
	}
	if h.failed != nil {
		h.mu.Unlock()
		w.fire(nil)
		return true
	}
	if h.procs == nil {
		h.procs = map[string][]*procWatcher{}
	}
	h.procs[ref] = append(h.procs[ref], w)
	pc, known := h.state[ref]
	due := h.ready && known
	h.startLocked()
	h.mu.Unlock()
	if due {
		w.fire(&pc)
	}
	return true
}

func (h *hub) unwatchProc(ref string, w *procWatcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := slices.DeleteFunc(h.procs[ref], func(x *procWatcher) bool { return x == w })
	if len(ws) == 0 {
		delete(h.procs, ref)
	} else {
		h.procs[ref] = ws
	}
}

type watchFire struct {
	w  *procWatcher
	pc *procChange
}

// watchFiresLocked lists the watchers an answer concerns: those of every
// process it reports, and on a full snapshot those of a process it does
// not list (gone: a spurious call, after which the handle settles). Only
// the reported processes are visited, not every watched one.
func (h *hub) watchFiresLocked(res watchAllResult, touched map[string]bool) []watchFire {
	var out []watchFire
	for i := range res.Procs {
		pc := &res.Procs[i]
		for _, w := range h.procs[pc.Ref] {
			out = append(out, watchFire{w, pc})
		}
	}
	if res.Full {
		for ref, ws := range h.procs {
			if !touched[ref] {
				for _, w := range ws {
					out = append(out, watchFire{w, nil})
				}
			}
		}
	}
	return out
}

var _ sandbox.Watchable = (*handle)(nil)

package keeper

import (
	"context"
	"encoding/json"
	"sort"
	"sync"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The change feed: what lets one long poll per connection (watch_all)
// replace a parked watch per stream and a parked wait per process. Those
// cost a goroutine, a context and an in-flight slot on each side for
// every live process (about three per process, which also capped one
// connection at maxInflight/3 processes); the feed costs a map entry.
//
// The keeper numbers every change (a start, a write or close of either
// stream, an exit once recorded, a removal) with a generation and keeps,
// per process, the generation of its last change. watch_all{since}
// answers with the current state of every process changed after since,
// waiting until there is one; since 0 (a new connection) gets them all.
// A burst of changes to one process is one entry in the answer: the
// reader gets states, not events, so nothing can overflow.

// maxTombstones bounds the removed processes the feed remembers. A client
// further behind than the oldest of them gets a full snapshot, in which a
// removed process is simply absent.
const maxTombstones = 4096

type feed struct {
	mu     sync.Mutex
	gen    uint64
	last   map[string]uint64 // ref → generation of its last change
	gone   map[string]uint64 // removed ref → generation of its removal
	pruned uint64            // removals at or below this were forgotten
	pulse  chan struct{}     // closed and replaced at every change
}

// note records a change of ref and wakes every watch_all.
func (f *feed) note(ref string, removed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	if f.last == nil {
		f.last, f.gone = map[string]uint64{}, map[string]uint64{}
	}
	if removed {
		delete(f.last, ref)
		f.gone[ref] = f.gen
		if len(f.gone) > maxTombstones {
			f.pruneLocked()
		}
	} else {
		f.last[ref] = f.gen
	}
	if f.pulse != nil {
		close(f.pulse)
		f.pulse = nil
	}
}

// pruneLocked forgets the older half of the tombstones.
func (f *feed) pruneLocked() {
	gens := make([]uint64, 0, len(f.gone))
	for _, g := range f.gone {
		gens = append(gens, g)
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] < gens[j] })
	f.pruned = max(f.pruned, gens[len(gens)/2])
	for ref, g := range f.gone {
		if g <= f.pruned {
			delete(f.gone, ref)
		}
	}
}

// since returns the refs changed and removed after gen, or full when the
// caller must take a whole snapshot instead (a new connection, a gen
// from before a prune or from another keeper); and the channel that
// closes at the next change.
func (f *feed) since(gen uint64) (now uint64, full bool, changed, removed []string, pulse <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pulse == nil {
		f.pulse = make(chan struct{})
	}
	now, pulse = f.gen, f.pulse
	if gen == 0 || gen < f.pruned || gen > f.gen {
		return now, true, nil, nil, pulse
	}
	for ref, g := range f.last {
		if g > gen {
			changed = append(changed, ref)
		}
	}
	for ref, g := range f.gone {
		if g > gen {
			removed = append(removed, ref)
		}
	}
	return now, false, changed, removed, pulse
}

// opWatchAll answers once anything changed after Since (at once for a
// full snapshot). The generation is taken before the states are read, so
// a state is never older than the generation it is reported under; a
// change racing the read is reported again by the next call.
func (s *server) opWatchAll(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[watchAllArgs](raw)
	if err != nil {
		return nil, err
	}
	for {
		gen, full, changed, removed, pulse := s.feed.since(a.Since)
		if full || len(changed)+len(removed) > 0 {
			return s.changes(gen, full, changed, removed), nil
		}
		select {
		case <-pulse:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *server) changes(gen uint64, full bool, changed, removed []string) watchAllResult {
	res := watchAllResult{Gen: gen, Full: full}
	s.mu.Lock()
	var es []*entry
	if full {
		for _, e := range s.table {
			es = append(es, e)
		}
	} else {
		for _, ref := range changed {
			if e := s.table[ref]; e != nil {
				es = append(es, e)
			} else {
				removed = append(removed, ref) // removed since the feed was read
			}
		}
	}
	s.mu.Unlock()
	for _, e := range es {
		res.Procs = append(res.Procs, e.change())
	}
	for _, ref := range removed {
		res.Procs = append(res.Procs, procChange{Ref: ref, Gone: true})
	}
	return res
}

// change is the state watch_all reports for e, with its exit once that is
// recorded (durable: done closes after the record's flush, RFC §16's
// rule). A process recovered from an earlier keeper is exited and its
// streams closed; a stream whose spill file nobody opened yet is reported
// closed with End -1 (unknown) rather than opened: a snapshot would
// otherwise hold a descriptor per recovered process.
func (e *entry) change() procChange {
	pc := procChange{Ref: e.id, Exited: e.exited()}
	if pc.Exited { // e.exit is set before done closes, and durable
		x := exitToWire(e.exit)
		pc.Exit = &x
	}
	for i, st := range []*LogState{&pc.Stdout, &pc.Stderr} {
		e.mu.Lock()
		l := e.logs[i]
		e.mu.Unlock()
		if l == nil {
			*st = LogState{End: -1, Closed: true}
			continue
		}
		*st = stateOf(l)
	}
	return pc
}

// follow enters a live process in the table and the feed, and follows
// it: through hooks where its handle and logs have them (the embedded
// local and bwrap backends), which costs no goroutine per process; else
// with a monitor goroutine. The hooks are set before the process enters
// the feed, so every change after that note is noted again.
func (s *server) follow(e *entry) {
	a, ok := e.h.(sandbox.AfterDoner)
	var ols [2]*sandbox.OutputLog
	for i, l := range e.logs {
		if ols[i], _ = l.(*sandbox.OutputLog); ols[i] == nil {
			ok = false
		}
	}
	if ok {
		note := func() { s.feed.note(e.id, false) }
		for _, l := range ols {
			l.OnChange(note)
		}
	}
	s.mu.Lock()
	s.table[e.id] = e
	s.mu.Unlock()
	s.feed.note(e.id, false)
	if !ok {
		go s.monitor(e)
		return
	}
	a.AfterDone(func() {
		s.recordExit(e)
		s.feed.note(e.id, false)
	})
}

// monitor follows a live process for the feed: every change of its
// streams and, once recorded, its exit. It is the process's one goroutine
// in the keeper beyond the backend's own. It ends when the process has
// settled and both streams are closed (the backend closes them before it
// settles, at the drain bound at the latest).
//
// Each round arms the streams first and notes the process after: a change
// before the arming is covered by that note (watch_all reads the state
// after it), one after wakes the next round. Noting first would lose a
// write landing between the note and the arming.
func (s *server) monitor(e *entry) {
	logs := e.logs
	done := e.h.Done()
	for {
		var armed [2]<-chan struct{}
		for i, l := range logs {
			if l != nil {
				armed[i] = l.Changed()
			}
		}
		s.feed.note(e.id, false)
		if done == nil && logs[0] == nil && logs[1] == nil {
			return
		}
		select {
		case <-armed[0]:
			if logs[0].Closed() {
				logs[0] = nil
			}
		case <-armed[1]:
			if logs[1].Closed() {
				logs[1] = nil
			}
		case <-done:
			s.recordExit(e)
			done = nil
		}
	}
}

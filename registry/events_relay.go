package registry

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// Events across nodes. A poll-events on node A also relays the events of
// the caller's processes other nodes hold: A pulls each holder's new
// events (a non-blocking forwarded poll from the cursor A keeps for that
// holder) and appends them to the scope's own log with A's sequence
// numbers, so the caller's one u64 cursor covers every node. A long poll
// pulls again every relayEvery while it waits. Events a holder evicted
// before A pulled them are added to the next batch's Missed. A holder
// that cannot be reached is retried on the next pull: its events wait
// in its own log (delayed, not lost, up to its retention).

const relayEvery = 250 * time.Millisecond

// relayState is one scope's relay on this node: per holder, the last
// seq pulled. mu serialises pulls, so no event is relayed twice.
type relayState struct {
	mu      sync.Mutex
	cursors map[string]uint64
	missed  uint64
}

func (r *Registry) relayFor(o owner) *relayState {
	r.relayMu.Lock()
	defer r.relayMu.Unlock()
	if r.relays == nil {
		r.relays = map[owner]*relayState{}
	}
	rs := r.relays[o]
	if rs == nil {
		rs = &relayState{cursors: map[string]uint64{}}
		r.relays[o] = rs
	}
	return rs
}

// relaying says whether poll-events relays (cluster mode with
// forwarding, and not itself a forwarded poll).
func (r *Registry) relaying(ctx context.Context) bool {
	return r.cfg.Forwarder != nil && ctx.Value(noForwardKey{}) == nil
}

// pullRemote relays the holders' new events into o's log; it returns
// the events missed on holders since the last call.
func (r *Registry) pullRemote(ctx context.Context, o owner) uint64 {
	rs := r.relayFor(o)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	nodes, err := r.dir.Holders(ctx, dirScope(o))
	if err != nil {
		r.log.Debug("event relay: holders unknown", append(o.attrs(), "err", err)...)
	}
	c, _ := CallerFrom(ctx)
	for _, n := range nodes {
		raw, err := r.cfg.Forwarder.Forward(ctx, n, RemoteCall{Op: OpPollEvents, Caller: c, Seq: rs.cursors[n], Max: maxEventBatch})
		var b EventBatch
		if err == nil {
			err = json.Unmarshal(raw, &b)
		}
		if errors.Is(err, ErrInvalidInput) { // the holder's log is behind our cursor: it lost its state
			rs.cursors[n] = 0
			continue
		}
		if err != nil {
			r.log.Debug("event relay: holder did not answer", append(o.attrs(), "node", n, "err", err)...)
			continue
		}
		rs.cursors[n], rs.missed = b.Next, rs.missed+b.Missed
		if len(b.Events) == 0 {
			continue
		}
		r.mu.Lock()
		sc := r.scopeLocked(o)
		for _, e := range b.Events {
			r.pushLocked(sc, evRec{ev: e})
		}
		r.mu.Unlock()
	}
	m := rs.missed
	rs.missed = 0
	return m
}

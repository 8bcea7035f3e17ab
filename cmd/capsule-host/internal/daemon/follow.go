package daemon

import (
	"context"
	"time"

	"github.com/capsule-host/capsule-host/registry"
)

// logWake is how a follow stream (the API's logs?follow=1 and the MCP
// endpoint's subscriptions) waits for a process's next output: on the
// registry's event log of the process's owner, whose log-ready and exited
// events come when output is written or the process ends. A follower is
// then told within a scheduling delay, not at the next poll tick (the API's
// 100 ms tick made `capsule-host mcp`'s resources/updated p50 68 ms).
//
// Any event of that owner wakes it (a spurious wake-up costs one read), and
// the wait is bounded by followKeepalive, so an event coalesced away costs
// at most that. Should the registry refuse to wait for this owner, it falls
// back to the followPoll tick.
type logWake struct {
	reg *registry.Registry
	ctx context.Context // carries the owner as the caller
	seq uint64          // the last event seen
	// poll is set once the event log refused this owner: tick instead.
	poll bool
}

func newLogWake(ctx context.Context, reg *registry.Registry, info registry.Info) *logWake {
	c := registry.Caller{Capsule: info.Capsule, Principal: info.Principal, Fallback: info.Principal == ""}
	return &logWake{reg: reg, ctx: registry.WithCaller(ctx, c)}
}

// wait returns after the owner's next event, after followKeepalive, or at
// once if events came since the last wait. The caller re-reads the log
// after it returns, whatever the reason; ctx's end is the caller's to see.
func (w *logWake) wait() {
	if !w.poll {
		b, err := w.reg.PollEvents(w.ctx, w.seq, 64, followKeepalive)
		if err == nil {
			w.seq = b.Next
			return
		}
		if w.ctx.Err() != nil {
			return
		}
		w.poll = true
	}
	t := time.NewTimer(followPoll)
	defer t.Stop()
	select {
	case <-w.ctx.Done():
	case <-t.C:
	}
}

package daemon

import (
	"context"
	"time"

	"github.com/capsule-host/capsule-host/registry"
)

// logWake is how a follow stream (the API's logs?follow=1 and the MCP
// endpoint's subscriptions) waits for a process's next output: on the
// process's own output logs and exit (registry.OperatorChanges), armed
// before each read, so a follower is told within a scheduling delay, not
// at the next poll tick (the API's 100 ms tick made `capsule-host mcp`'s
// resources/updated p50 68 ms).
//
// Why not the owner's event log: a follower polling it consumed the
// log-ready events, each consumption re-armed the next one, and that flood
// evicted the owner's unread events (TestFollowKeepsOwnerEvents). The
// wait is bounded by followKeepalive. A process this registry does not
// hold (on another node of a cluster) falls back to the followPoll tick.
type logWake struct {
	reg *registry.Registry
	ctx context.Context
	id  string
	ch  registry.Changes
	// poll is set once the process is not held here: tick instead.
	poll bool
	// exited is set once the exit woke a wait: later waits are for the
	// logs' last writes and their close, not the exit again (a closed
	// Done would spin the reader until the pump's drain ends).
	exited bool
}

func newLogWake(ctx context.Context, reg *registry.Registry, id string) *logWake {
	return &logWake{reg: reg, ctx: ctx, id: id}
}

// arm is called before each read of the logs: the wait that follows
// returns at once if anything was written since.
func (w *logWake) arm() {
	if w.poll {
		return
	}
	ch, err := w.reg.OperatorChanges(w.id)
	if err != nil {
		w.poll = true
		return
	}
	if w.exited {
		ch.Exited = nil
	}
	w.ch = ch
}

// wait returns after the next write or the exit since the last arm,
// after followKeepalive, or when ctx ends (the caller's to see). The
// caller re-reads the log after it returns, whatever the reason.
func (w *logWake) wait() {
	d := followKeepalive
	if w.poll {
		d = followPoll
	}
	t := time.NewTimer(d)
	defer t.Stop()
	if w.poll {
		select {
		case <-w.ctx.Done():
		case <-t.C:
		}
		return
	}
	select {
	case <-w.ctx.Done():
	case <-t.C:
	case <-w.ch.Stdout:
	case <-w.ch.Stderr:
	case <-w.ch.Exited:
		w.exited = true
	}
}

package keeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The snapshot operation: the figures a list shows of many processes in
// one round trip (both logs' states, and the stats of those asked for),
// where a list otherwise asks log_state twice and stats once per
// process. It is additive to protocol version 1: an older keeper answers
// it as an unknown operation (ErrProtocol) and the client then says
// sandbox.ErrNoSnapshot, so that its caller asks one process at a time.
const opSnapshot = "snapshot"

// snapshotBatch bounds the processes of one request, so that an answer
// (about 200 bytes of JSON each) stays far inside MaxFrame.
const snapshotBatch = 2000

type snapshotQuery struct {
	Ref   string `json:"ref"`
	Stats bool   `json:"stats,omitempty"`
}

type snapshotArgs struct {
	Procs []snapshotQuery `json:"procs"`
}

// procSnapshot is one process's answer; Found is false for a ref the
// keeper does not hold (cleaned up), and the rest is then empty.
type procSnapshot struct {
	Found  bool         `json:"found"`
	Stdout LogState     `json:"stdout"`
	Stderr LogState     `json:"stderr"`
	Stats  *statsResult `json:"stats,omitempty"`
}

type snapshotResult struct {
	Procs []procSnapshot `json:"procs"`
}

func (s *server) opSnapshot(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[snapshotArgs](raw)
	if err != nil {
		return nil, err
	}
	if len(a.Procs) > snapshotBatch {
		return nil, fmt.Errorf("snapshot of %d processes (max %d): %w", len(a.Procs), snapshotBatch, ErrProtocol)
	}
	out := snapshotResult{Procs: make([]procSnapshot, len(a.Procs))}
	for i, q := range a.Procs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if out.Procs[i], err = s.snapshotOne(q); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// snapshotOne answers one query as log_state and stats would.
func (s *server) snapshotOne(q snapshotQuery) (procSnapshot, error) {
	e, err := s.get(q.Ref)
	if errors.Is(err, sandbox.ErrNotFound) {
		return procSnapshot{}, nil
	}
	var ps procSnapshot
	for i, st := range []*LogState{&ps.Stdout, &ps.Stderr} {
		l, err := e.log([]Stream{Stdout, Stderr}[i])
		if err != nil {
			return procSnapshot{}, err
		}
		*st = stateOf(l)
	}
	ps.Found = true
	if q.Stats {
		ps.Stats = &statsResult{}
		if e.h != nil {
			*ps.Stats = statsToWire(e.h.Stats())
		}
	}
	return ps, nil
}

func statsToWire(st sandbox.Stats) statsResult {
	var out statsResult
	if st.CPUTime != nil {
		ns := int64(*st.CPUTime)
		out.CPUTimeNS = &ns
	}
	out.MemoryPeak = st.MemoryPeak
	return out
}

func (r statsResult) stats() sandbox.Stats {
	var st sandbox.Stats
	if r.CPUTimeNS != nil {
		d := time.Duration(*r.CPUTimeNS)
		st.CPUTime = &d
	}
	st.MemoryPeak = r.MemoryPeak
	return st
}

// Snapshot takes the figures of qs in one round trip per snapshotBatch.
// Against a keeper without the operation it is sandbox.ErrNoSnapshot,
// then and on every later call of this connection without asking again.
func (c *Client) Snapshot(ctx context.Context, qs []sandbox.SnapshotQuery) ([]sandbox.Snapshot, error) {
	return c.snapshot(ctx, opSnapshot, qs)
}

// snapshot is Snapshot with the operation's name (a test names one no
// keeper knows, to be an older keeper).
func (c *Client) snapshot(ctx context.Context, op string, qs []sandbox.SnapshotQuery) ([]sandbox.Snapshot, error) {
	if c.noSnapshot.Load() {
		return nil, fmt.Errorf("keeper %s: %w", op, sandbox.ErrNoSnapshot)
	}
	out := make([]sandbox.Snapshot, 0, len(qs))
	for len(qs) > 0 {
		part := qs[:min(len(qs), snapshotBatch)]
		qs = qs[len(part):]
		a := snapshotArgs{Procs: make([]snapshotQuery, 0, len(part))}
		for _, q := range part {
			a.Procs = append(a.Procs, snapshotQuery{Ref: q.Ref.ID, Stats: q.Stats})
		}
		var r snapshotResult
		if err := c.call(ctx, op, a, &r); err != nil {
			if errors.Is(err, ErrProtocol) && c.failure() == nil { // answered: it does not know the operation
				c.noSnapshot.Store(true)
				err = fmt.Errorf("%w: %w", err, sandbox.ErrNoSnapshot)
			}
			return nil, err
		}
		if len(r.Procs) != len(part) {
			return nil, fmt.Errorf("keeper %s: %d answers to %d queries: %w", op, len(r.Procs), len(part), ErrProtocol)
		}
		for i, ps := range r.Procs {
			out = append(out, ps.snapshot(part[i], c.backend))
		}
	}
	return out, nil
}

func (ps procSnapshot) snapshot(q sandbox.SnapshotQuery, backend string) sandbox.Snapshot {
	if !ps.Found || q.Ref.Backend != backend {
		return sandbox.Snapshot{}
	}
	s := sandbox.Snapshot{Found: true,
		Stdout: sandbox.LogFigures{Retained: ps.Stdout.Retained, Dropped: ps.Stdout.Dropped},
		Stderr: sandbox.LogFigures{Retained: ps.Stderr.Retained, Dropped: ps.Stderr.Dropped},
	}
	if ps.Stats != nil {
		s.Stats = ps.Stats.stats()
	}
	return s
}

var _ sandbox.Snapshotter = (*Backend)(nil)

// Snapshot takes qs from the keeper in one round trip (see
// Client.Snapshot).
func (b *Backend) Snapshot(ctx context.Context, qs []sandbox.SnapshotQuery) ([]sandbox.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, opBound)
	defer cancel()
	c, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Snapshot(ctx, qs)
}

package keeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// TestSnapshot: one snapshot answers, per process and in query order,
// what log_state (both streams) and stats answer one call at a time; a
// ref the keeper does not hold is not Found; stats only when asked.
func TestSnapshot(t *testing.T) {
	dir, _ := internalKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	refs := feedProcs(t, ctx, c, 3)
	for _, ref := range refs[:2] { // two finish with output on both streams
		if _, err := c.WriteStdin(ctx, ref, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	gone := sandbox.Ref{Backend: refs[0].Backend, ID: "no-such-process", Lifetime: sandbox.LifetimeBackend}
	qs := []sandbox.SnapshotQuery{{Ref: refs[2], Stats: true}, {Ref: gone, Stats: true}, {Ref: refs[0]}, {Ref: refs[1], Stats: true}}
	got, err := c.Snapshot(ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(qs) {
		t.Fatalf("%d answers to %d queries", len(got), len(qs))
	}
	if got[1] != (sandbox.Snapshot{}) {
		t.Fatalf("unknown ref: %+v, want not found and empty", got[1])
	}
	for k, q := range qs {
		if q.Ref == gone {
			continue
		}
		if !got[k].Found {
			t.Fatalf("query %d (%s): not found", k, q.Ref.ID)
		}
		for i, s := range []Stream{Stdout, Stderr} {
			st, err := c.logCall(ctx, opLogState, q.Ref, s, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := sandbox.LogFigures{Retained: st.Retained, Dropped: st.Dropped}
			if f := [2]sandbox.LogFigures{got[k].Stdout, got[k].Stderr}[i]; f != want {
				t.Fatalf("query %d %s: snapshot %+v, log_state %+v", k, s, f, want)
			}
		}
		if !q.Stats && got[k].Stats != (sandbox.Stats{}) {
			t.Fatalf("query %d: stats %+v not asked for", k, got[k].Stats)
		}
	}
	if got[0].Stdout.Retained != 0 || got[2].Stdout.Retained == 0 || got[2].Stderr.Retained == 0 {
		t.Fatalf("figures: running %+v, finished %+v", got[0], got[2])
	}
}

// TestSnapshotOlderKeeper: a keeper without the operation (an older one
// answers an unknown operation with ErrProtocol) makes Snapshot
// ErrNoSnapshot, and the connection remembers it: the next call asks
// nothing. The connection stays usable.
func TestSnapshotOlderKeeper(t *testing.T) {
	dir, _ := internalKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	refs := feedProcs(t, ctx, c, 1)
	qs := []sandbox.SnapshotQuery{{Ref: refs[0]}}
	if _, err := c.snapshot(ctx, "snapshot_unknown_to_this_keeper", qs); !errors.Is(err, sandbox.ErrNoSnapshot) || !errors.Is(err, ErrProtocol) {
		t.Fatalf("unknown operation: %v, want ErrNoSnapshot and ErrProtocol", err)
	}
	if _, err := c.Snapshot(ctx, qs); !errors.Is(err, sandbox.ErrNoSnapshot) || errors.Is(err, ErrProtocol) {
		t.Fatalf("after an unknown operation: %v, want ErrNoSnapshot without asking", err)
	}
	if _, err := c.Inspect(ctx, refs[0]); err != nil {
		t.Fatalf("connection after the refusal: %v", err)
	}
}

// TestSnapshotBatchBound: a request over snapshotBatch is refused, and
// the client splits a bigger query list so it never sends one.
func TestSnapshotBatchBound(t *testing.T) {
	dir, _ := internalKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := snapshotArgs{Procs: make([]snapshotQuery, snapshotBatch+1)}
	if err := c.call(ctx, opSnapshot, big, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("%d queries in one request: %v, want ErrProtocol", len(big.Procs), err)
	}
	qs := make([]sandbox.SnapshotQuery, 2*snapshotBatch+3)
	for i := range qs {
		qs[i].Ref = sandbox.Ref{Backend: c.Backend(), ID: "absent", Lifetime: sandbox.LifetimeBackend}
	}
	got, err := c.Snapshot(ctx, qs)
	if err != nil || len(got) != len(qs) {
		t.Fatalf("split snapshot: %d answers (%v), want %d", len(got), err, len(qs))
	}
}

package sandbox

import (
	"context"
	"errors"
)

// ErrNoSnapshot: this backend (an older keeper) cannot take snapshots in
// bulk now; the caller takes them one process at a time (SnapshotHandle).
var ErrNoSnapshot = errors.New("backend takes no bulk snapshots")

// SnapshotQuery names one process of a Snapshot and whether its Stats
// are wanted (a cgroup read each: the caller caches them, and asks only
// for the stale ones).
type SnapshotQuery struct {
	Ref   Ref
	Stats bool
}

// LogFigures are the two figures of an output log that a list shows.
type LogFigures struct {
	Retained int64
	Dropped  int64
}

// Snapshot is what a list shows of one process that only its backend
// knows: its logs' figures and, when asked, its Stats.
type Snapshot struct {
	// Found is false when the backend holds no such process; the other
	// fields are then zero.
	Found          bool
	Stdout, Stderr LogFigures
	Stats          Stats
}

// Snapshotter is implemented by backends that take the snapshots of many
// processes in one call (local and bwrap in-process, the keeper's in one
// round trip instead of three per process): a list of 500 keeper-held
// processes otherwise costs 1,500 round trips. The answer is in query
// order. An error fails the whole call: ErrNoSnapshot, or the backend
// is unreachable.
type Snapshotter interface {
	Snapshot(ctx context.Context, qs []SnapshotQuery) ([]Snapshot, error)
}

// SnapshotHandle is the snapshot of one process taken through its
// Handle, one call per figure: what a Snapshotter does in-process, and
// what a caller does for a backend that is none.
func SnapshotHandle(h Handle, stats bool) Snapshot {
	out, errl := h.Stdout(), h.Stderr()
	s := Snapshot{
		Found:  true,
		Stdout: LogFigures{Retained: out.Retained(), Dropped: out.Dropped()},
		Stderr: LogFigures{Retained: errl.Retained(), Dropped: errl.Dropped()},
	}
	if stats {
		s.Stats = h.Stats()
	}
	return s
}

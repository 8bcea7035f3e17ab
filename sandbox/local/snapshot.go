package local

import (
	"context"

	"github.com/capsule-host/capsule-host/sandbox"
)

var _ sandbox.Snapshotter = (*Backend)(nil)

// Snapshot takes the processes' figures in-process, under one lock for
// the lookups; a ref this Backend value does not hold is not Found.
func (b *Backend) Snapshot(ctx context.Context, qs []sandbox.SnapshotQuery) ([]sandbox.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ps := make([]*proc, len(qs))
	b.mu.Lock()
	for i, q := range qs {
		if q.Ref.Backend == b.name {
			ps[i] = b.procs[q.Ref.ID]
		}
	}
	b.mu.Unlock()
	out := make([]sandbox.Snapshot, len(qs))
	for i, p := range ps {
		if p != nil {
			out[i] = sandbox.SnapshotHandle(p, qs[i].Stats)
		}
	}
	return out, nil
}

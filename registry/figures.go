package registry

import (
	"context"

	"github.com/capsule-host/capsule-host/sandbox"
)

// figuresOf takes the backend figures of ps for a list, in order: one
// Snapshot call per backend that is a sandbox.Snapshotter (a keeper's
// 500 processes in one round trip instead of 1,500), the rest one
// process at a time through its handle, infoFanout at a time. A backend
// whose Snapshot fails (an older keeper: ErrNoSnapshot; one that cannot
// be reached), and a process its answer does not find, go the handle's
// way too, which reports the last figures the handle knows: a list never
// fails for a figure. Stats are asked only where the cache is stale.
func (r *Registry) figuresOf(ctx context.Context, ps []*proc) []sandbox.Snapshot {
	out := make([]sandbox.Snapshot, len(ps))
	cached := make([]sandbox.Stats, len(ps))
	want := make([]bool, len(ps))
	bulk := map[sandbox.Snapshotter][]int{}
	var rest []int
	for i, p := range ps {
		var fresh bool
		cached[i], fresh = r.cachedStats(p)
		want[i] = !fresh
		if sn, ok := p.backend.(sandbox.Snapshotter); ok {
			bulk[sn] = append(bulk[sn], i)
		} else {
			rest = append(rest, i)
		}
	}
	for sn, idx := range bulk {
		rest = append(rest, r.figuresBulk(ctx, sn, ps, idx, want, out)...)
	}
	fanout(len(rest), func(k int) {
		i := rest[k]
		out[i] = sandbox.SnapshotHandle(ps[i].h, want[i])
	})
	for i, p := range ps {
		if want[i] {
			out[i].Stats = r.noteStats(p, out[i].Stats)
		} else {
			out[i].Stats = cached[i]
		}
	}
	return out
}

// figuresBulk fills out[i] for the indexes idx from one Snapshot call,
// and returns those it could not fill.
func (r *Registry) figuresBulk(ctx context.Context, sn sandbox.Snapshotter, ps []*proc, idx []int, want []bool, out []sandbox.Snapshot) []int {
	qs := make([]sandbox.SnapshotQuery, len(idx))
	for k, i := range idx {
		qs[k] = sandbox.SnapshotQuery{Ref: ps[i].h.Ref(), Stats: want[i]}
	}
	snaps, err := sn.Snapshot(ctx, qs)
	if err != nil {
		r.log.Debug("list: bulk snapshot failed; one process at a time", "processes", len(idx), "err", err)
		return idx
	}
	var missed []int
	for k, i := range idx {
		if !snaps[k].Found {
			missed = append(missed, i)
			continue
		}
		out[i] = snaps[k]
	}
	return missed
}

package registry

import (
	"context"
	"fmt"
	"sync"
)

// LocalDirectory is the single-node directory: today's behaviour. Its
// counters mirror the registry's own (which the journal makes durable
// through Adopt), and every record names this node, so a lookup of an ID
// this registry does not hold is simply no-such-process.
type LocalDirectory struct {
	mu     sync.Mutex
	counts map[DirScope]DirHolding
	procs  map[[32]byte]DirProcess
}

// NewLocalDirectory returns an empty single-node directory.
func NewLocalDirectory() *LocalDirectory {
	return &LocalDirectory{counts: map[DirScope]DirHolding{}, procs: map[[32]byte]DirProcess{}}
}

// Node is "local": the one node there is.
func (d *LocalDirectory) Node() string { return "local" }

// Reserve takes the slots under the caps, atomically.
func (d *LocalDirectory) Reserve(ctx context.Context, r DirReservation) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(ctx, "reserve")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.counts[r.Scope]
	if err := checkCaps(h, r); err != nil {
		return err
	}
	h.Running++
	if r.Persistent {
		h.Retained++
	}
	d.counts[r.Scope] = h
	if r.Record != nil {
		d.procs[r.Record.Key] = *r.Record
	}
	return nil
}

// checkCaps is the quota decision both implementations make on a total.
func checkCaps(h DirHolding, r DirReservation) error {
	if h.Running >= r.MaxConcurrent {
		return fmt.Errorf("%w: %d of %d concurrent processes of this principal are running", ErrQuota, h.Running, r.MaxConcurrent)
	}
	if r.Persistent && h.Retained >= r.MaxRetained {
		return fmt.Errorf("%w: %d of %d retained process IDs of this principal are in use; release exited processes", ErrRegistryFull, h.Retained, r.MaxRetained)
	}
	return nil
}

// Release returns slots; it never goes below zero.
func (d *LocalDirectory) Release(_ context.Context, s DirScope, running, retained int, unpublish ...[32]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range unpublish {
		delete(d.procs, k)
	}
	h := d.counts[s]
	h.Running, h.Retained = max(0, h.Running-running), max(0, h.Retained-retained)
	if h == (DirHolding{}) {
		delete(d.counts, s)
	} else {
		d.counts[s] = h
	}
	return nil
}

// Publish records p.
func (d *LocalDirectory) Publish(_ context.Context, p DirProcess) error {
	d.mu.Lock()
	d.procs[p.Key] = p
	d.mu.Unlock()
	return nil
}

// Unpublish forgets key's record.
func (d *LocalDirectory) Unpublish(_ context.Context, key [32]byte) error {
	d.mu.Lock()
	delete(d.procs, key)
	d.mu.Unlock()
	return nil
}

// Adopt counts an adopted process without a cap check.
func (d *LocalDirectory) Adopt(_ context.Context, s DirScope, h DirHolding, rec *DirProcess) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.counts[s]
	c.Running += h.Running
	c.Retained += h.Retained
	d.counts[s] = c
	if rec != nil {
		d.procs[rec.Key] = *rec
	}
	return nil
}

// Lookup finds key's record.
func (d *LocalDirectory) Lookup(_ context.Context, key [32]byte) (DirProcess, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.procs[key]
	if !ok {
		return DirProcess{}, ErrNoSuchProcess
	}
	return p, nil
}

// Holding is what the scope holds (tests and the operator view).
func (d *LocalDirectory) Holding(s DirScope) DirHolding {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[s]
}

// LiveNodes is the one node; its load is the registry's own (placement
// never asks a LocalDirectory: there is nowhere else to go).
func (d *LocalDirectory) LiveNodes(context.Context) ([]DirNode, error) {
	return []DirNode{{Name: d.Node()}}, nil
}

// Holders is none: this node holds everything there is.
func (d *LocalDirectory) Holders(context.Context, DirScope) ([]string, error) { return nil, nil }

// AdoptDone has nothing to do: Adopt counted into the only copy.
func (d *LocalDirectory) AdoptDone(context.Context) error { return nil }

package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/crypto/blake2b"
)

// The directory seam: where the facts that must hold across daemons live
// (which node holds which process, and the per-(capsule, principal)
// counters the quotas are checked against). The registry keeps its own
// per-node state as before; with a Directory it also reserves every spawn
// in it before anything starts, publishes each persistent process's record,
// and returns what it took on every exit, forget and failure path.
// LocalDirectory is the single-node implementation (today's behaviour:
// the counters of this registry are the whole truth); registry/etcddir is
// the cluster one.

// dirBound bounds one directory call the registry makes on its own
// behalf (a release after an exit, an adoption): never an unbounded wait
// on a store that may be unreachable.
const dirBound = 5 * time.Second

// DirScope names a (capsule, principal): the unit quotas count in.
type DirScope struct {
	Capsule   string `json:"capsule"`
	Principal string `json:"principal"`
	Fallback  bool   `json:"fallback,omitempty"`
}

// DirReservation asks for one concurrent slot (and a retained one when
// Persistent) of Scope, against the caps.
type DirReservation struct {
	Scope         DirScope
	Persistent    bool
	MaxConcurrent int
	MaxRetained   int
	// Record, when set, is published in the same write as the
	// reservation (a persistent process: its ID is drawn before).
	Record *DirProcess
}

// DirProcess is the directory's record of a persistent process: the keyed
// hash of its ID (never the raw ID), its owner, holder and label.
type DirProcess struct {
	Key   [32]byte
	Owner DirScope
	Node  string
	Label string
	// Lost (Lookup only): Node's lease expired; nothing serves it.
	Lost bool
}

// DirHolding is what a node holds for one scope (Adopt and the operator
// view).
type DirHolding struct {
	Running  int `json:"running"`
	Retained int `json:"retained"`
}

// Directory is the seam. Every method is safe for concurrent use and
// honours ctx. Errors are the registry's classes: ErrQuota and
// ErrRegistryFull for a refused reservation, ErrUnavailable when the store
// cannot be reached (the quota cannot be checked: nothing may start), a
// *DirRecordError for a value under the directory's keys it cannot read.
type Directory interface {
	// Node is the name this directory writes as the holder.
	Node() string
	// Reserve takes the slots of r or refuses; on success the caller owns
	// them until Release.
	Reserve(ctx context.Context, r DirReservation) error
	// Release returns slots Reserve or Adopt took, and deletes the
	// records of unpublish in the same write.
	Release(ctx context.Context, s DirScope, running, retained int, unpublish ...[32]byte) error
	// Publish records a started persistent process.
	Publish(ctx context.Context, p DirProcess) error
	// Unpublish removes a process's record (it was forgotten).
	Unpublish(ctx context.Context, key [32]byte) error
	// Adopt counts a process this node took back after a restart: its
	// slots are taken without a cap check (it exists), and its record is
	// (re)published when rec is not nil.
	Adopt(ctx context.Context, s DirScope, h DirHolding, rec *DirProcess) error
	// Lookup finds a process's record by key; ErrNoSuchProcess when none.
	Lookup(ctx context.Context, key [32]byte) (DirProcess, error)
	// AdoptDone says the registry's Adopt has counted everything it took
	// back: after a restart within the lease the earlier counts held until
	// now (no window for another node to over-reserve); they are replaced
	// by what was adopted.
	AdoptDone(ctx context.Context) error
	// LiveNodes is every registered node with its capacity and load
	// (placement), by name.
	LiveNodes(ctx context.Context) ([]DirNode, error)
	// Holders is the nodes other than this one that hold something of s
	// (a cluster-wide list asks each of them), by name.
	Holders(ctx context.Context, s DirScope) ([]string, error)
}

// DirNode is one live node as placement sees it: Running is what it
// last published (it lags by a write; the node itself refuses beyond its
// capacity, and placement then tries the next).
type DirNode struct {
	Name     string
	Capacity int // 0: no cap
	Running  int
}

// DirRecordError is a value under the directory's keys that is not one of
// ours (written by something else, or corrupted): the key is named, the
// call fails with ErrInternal, nothing panics.
type DirRecordError struct {
	Key    string
	Reason string
}

func (e *DirRecordError) Error() string {
	return fmt.Sprintf("directory record %q unreadable: %s", e.Key, e.Reason)
}

func (e *DirRecordError) Unwrap() error { return ErrInternal }

// ErrNodeNameTaken is a node registering under a name another live node
// holds. errors.Is(err, ErrUnavailable) also holds.
var ErrNodeNameTaken = fmt.Errorf("%w: node name taken", ErrUnavailable)

// dirHold is what a process holds in the directory, so every path
// releases exactly what was taken, once.
type dirHold uint8

const (
	holdRunning dirHold = 1 << iota
	holdRetained
	holdPublished
	holdAll = holdRunning | holdRetained | holdPublished
)

// dirKeyOf names id in the directory: keyed with the cluster's key, so
// every node computes the same name, and never the raw ID.
func (r *Registry) dirKeyOf(id string) [32]byte {
	h, _ := blake2b.New256(r.dirHash[:]) // 32-byte key: never fails
	h.Write([]byte(id))
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func dirScope(o owner) DirScope {
	return DirScope{Capsule: o.capsule, Principal: o.principal, Fallback: o.fallback}
}

// nodeName is this node's name in cluster mode, "" on a single node.
func (r *Registry) nodeName() string {
	if _, local := r.dir.(*LocalDirectory); local {
		return ""
	}
	return r.dir.Node()
}

// Directory returns the registry's directory (never nil).
func (r *Registry) Directory() Directory { return r.dir }

// reserveIn is reserve plus the directory's reservation, made before
// anything starts; a refusal undoes the local one.
func (r *Registry) reserveIn(ctx context.Context, o owner, pr *prepared) (*proc, error) {
	p, err := r.reserve(o, pr)
	if err != nil {
		return nil, err
	}
	r.mu.Lock() // a reload replaces cs.policy under mu
	q := r.quotasFor(&pr.cs.policy)
	r.mu.Unlock()
	dr := DirReservation{Scope: dirScope(o), Persistent: p.persistent, MaxConcurrent: q.MaxConcurrent, MaxRetained: q.MaxRetained}
	if p.persistent { // published with the reservation: no ID escapes that another node cannot find
		dr.Record = &DirProcess{Key: r.dirKeyOf(p.id), Owner: dirScope(o), Node: r.dir.Node(), Label: p.label}
	}
	err = r.dir.Reserve(ctx, dr)
	r.mu.Lock()
	if err != nil {
		r.unreserveLocked(p)
	} else {
		p.dirHeld = holdRunning
		if p.persistent {
			p.dirHeld |= holdRetained | holdPublished
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.inflight.Done()
		if !errors.Is(err, ErrQuota) && !errors.Is(err, ErrRegistryFull) {
			r.log.Warn("spawn refused: the directory could not reserve", append(o.attrs(), "err", err)...)
		}
		return nil, err
	}
	return p, nil
}

// dirRelease returns what p still holds among want, once. Called after
// r.mu is released: the directory may be a network away.
func (r *Registry) dirRelease(p *proc, want dirHold) {
	r.mu.Lock()
	h := p.dirHeld & want
	p.dirHeld &^= h
	r.mu.Unlock()
	if h == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dirBound)
	defer cancel()
	var run, ret int
	if h&holdRunning != 0 {
		run = 1
	}
	if h&holdRetained != 0 {
		ret = 1
	}
	var unpub [][32]byte
	if h&holdPublished != 0 {
		unpub = append(unpub, r.dirKeyOf(p.id))
	}
	switch {
	case run+ret > 0: // one write: the slots and the record
		if err := r.dir.Release(ctx, dirScope(p.own), run, ret, unpub...); err != nil {
			r.log.Warn("directory release failed: the slots stay taken until this node's lease is renewed or expires", append(p.attrs(), "err", err)...)
		}
	case len(unpub) > 0:
		if err := r.dir.Unpublish(ctx, unpub[0]); err != nil {
			r.log.Warn("directory unpublish failed", append(p.attrs(), "err", err)...)
		}
	}
}

// dirAdopt counts an adopted process in the directory before its watcher
// runs (so its exit releases what this took).
func (r *Registry) dirAdopt(p *proc) {
	r.mu.Lock()
	h := DirHolding{Retained: 1}
	p.dirHeld = holdRetained | holdPublished
	if !p.exited {
		h.Running = 1
		p.dirHeld |= holdRunning
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), dirBound)
	defer cancel()
	rec := &DirProcess{Key: r.dirKeyOf(p.id), Owner: dirScope(p.own), Node: r.dir.Node(), Label: p.label}
	if err := r.dir.Adopt(ctx, dirScope(p.own), h, rec); err != nil {
		r.log.Warn("adopted process not counted in the directory", append(p.attrs(), "err", err)...)
	}
}

// remoteHolder is the lookup of an ID this node does not hold: a process
// of the caller held by another node answers ErrUnavailable naming that
// node (never no-such-process: it exists); anything else stays
// ErrNoSuchProcess, so other principals learn nothing.
func (r *Registry) remoteHolder(ctx context.Context, o owner, id string) error {
	if _, local := r.dir.(*LocalDirectory); local {
		return ErrNoSuchProcess
	}
	key := r.dirKeyOf(id)
	rec, ok := r.holders.get(key)
	if !ok {
		var err error
		rec, err = r.dir.Lookup(ctx, key)
		if err != nil && !errors.Is(err, ErrNoSuchProcess) {
			return err // unreachable (ErrUnavailable) or unreadable (*DirRecordError): not "no such"
		}
		if err != nil {
			return ErrNoSuchProcess
		}
		if !rec.Lost && rec.Node != r.dir.Node() && r.cfg.Forwarder != nil {
			r.holders.put(key, rec) // only forwarding's answers invalidate it
		}
	}
	if rec.Owner != dirScope(o) || rec.Node == r.dir.Node() {
		return ErrNoSuchProcess
	}
	if rec.Lost {
		return fmt.Errorf("%w: its node %q left the cluster (lease expired): the process is lost", ErrNoSuchProcess, rec.Node)
	}
	return &HeldElsewhereError{Node: rec.Node}
}

// holderCache remembers which node holds a process of another node:
// processes never move, so the directory is asked once per ID, not per
// call. An entry is dropped when its holder answers no-such-process
// (released), cannot be reached (it may be gone: the directory decides
// again), or the ID is released through this node; the cache is emptied
// when it reaches its bound.
type holderCache struct {
	mu sync.Mutex
	m  map[[32]byte]DirProcess
}

const holderCacheMax = 1 << 16

func (c *holderCache) get(k [32]byte) (DirProcess, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[k]
	return p, ok
}

func (c *holderCache) put(k [32]byte, p DirProcess) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= holderCacheMax {
		c.m = map[[32]byte]DirProcess{}
	}
	c.m[k] = p
}

func (c *holderCache) drop(k [32]byte) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}

// HeldElsewhereError is a call for a process another node holds (it is
// unreachable from here: not forwarded, or its node is down until its
// lease expires). errors.Is(err, ErrUnavailable) holds.
type HeldElsewhereError struct{ Node string }

func (e *HeldElsewhereError) Error() string {
	return fmt.Sprintf("the process is held by node %q, which this node cannot reach", e.Node)
}

func (e *HeldElsewhereError) Unwrap() error { return ErrUnavailable }

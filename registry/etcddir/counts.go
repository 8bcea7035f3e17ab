package etcddir

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capsule-host/capsule-host/registry"
)

// Reserve takes the slots of r cluster-wide: one transaction conditional
// on the scope's gen, made before anything starts.
func (d *Dir) Reserve(ctx context.Context, r registry.DirReservation) error {
	if !d.live.Load() {
		return fmt.Errorf("%w: node %q holds no lease in etcd: the quota cannot be checked", registry.ErrUnavailable, d.node)
	}
	delta := registry.DirHolding{Running: 1}
	if r.Persistent {
		delta.Retained = 1
	}
	var then []clientv3.Op
	if r.Record != nil {
		then = append(then, d.publishOp(*r.Record))
	}
	if err := d.change(ctx, r.Scope, delta, &r, then...); err != nil {
		return err
	}
	if r.Record != nil {
		d.mu.Lock()
		d.published[r.Record.Key] = *r.Record
		d.mu.Unlock()
	}
	return nil
}

// Release returns slots (never below zero). A failed write is kept as a
// dirty scope and rewritten by the keep-alive loop when etcd answers.
func (d *Dir) Release(ctx context.Context, s registry.DirScope, running, retained int, unpublish ...[32]byte) error {
	then := make([]clientv3.Op, 0, len(unpublish))
	d.mu.Lock()
	for _, k := range unpublish {
		delete(d.published, k)
		then = append(then, clientv3.OpDelete(d.procKey(k)))
	}
	d.mu.Unlock()
	return d.change(ctx, s, registry.DirHolding{Running: -running, Retained: -retained}, nil, then...)
}

// Adopt counts a process this node took back, without a cap check.
func (d *Dir) Adopt(ctx context.Context, s registry.DirScope, h registry.DirHolding, rec *registry.DirProcess) error {
	if err := d.change(ctx, s, h, nil); err != nil {
		return err
	}
	if rec != nil {
		return d.Publish(ctx, *rec)
	}
	return nil
}

// change applies delta to this node's count of scope s: with cap (a
// reservation) the new total is checked first. Serialised per scope on
// this node; across nodes the gen CAS decides.
// then is written in the same transaction (a record published with its
// reservation, or deleted with its release).
func (d *Dir) change(ctx context.Context, s registry.DirScope, delta registry.DirHolding, cap *registry.DirReservation, then ...clientv3.Op) error {
	sk := scopeKey(s)
	l := d.scopeLock(sk)
	l.Lock()
	defer l.Unlock()
	d.mu.Lock()
	st := d.cache[sk]
	mine := d.mine[sk]
	d.mu.Unlock()
	mine.Owner = s
	next := mine
	next.Running = max(0, next.Running+delta.Running)
	next.Retained = max(0, next.Retained+delta.Retained)
	var err error
	if cap == nil && d.addTally(sk, s, delta) {
		if len(then) > 0 { // adopting: etcd keeps the earlier run's counts until AdoptDone, not the records
			_, err := d.txn(ctx, nil, then, nil)
			return unavailableIf("unpublish process", err)
		}
		return nil
	}
	if cap == nil {
		d.setMine(sk, next) // a release or an adoption is true at once, whatever etcd says
	}
	for range casAttempts {
		if st == nil {
			if st, err = d.fetchScope(ctx, sk); err != nil {
				break
			}
		}
		if cap != nil {
			if cerr := checkTotal(st, delta, cap); cerr != nil {
				if !st.fresh {
					st = nil // counts that expired with a lease may still be cached
					continue
				}
				return cerr
			}
		}
		var ok bool
		ok, st, err = d.casCount(ctx, sk, st, next, then)
		if err != nil {
			break
		}
		// Only this node writes its count, under the scope lock: etcd
		// holding next already means an attempt retry did not hear back
		// from (a proposal lost with its leader) committed. Not with ops
		// of its own (a record published with the reservation): a count
		// equal by chance would skip them, so such a change goes round.
		ok = ok || (len(then) == 0 && st.nodes[d.node] == next.DirHolding)
		if ok {
			if cap != nil {
				d.setMine(sk, next)
				d.addTally(sk, s, delta)
			}
			d.mu.Lock()
			d.cache[sk] = st
			delete(d.dirty, sk)
			d.mu.Unlock()
			return nil
		}
	}
	if err == nil {
		err = fmt.Errorf("%w: scope contention: %d attempts", registry.ErrUnavailable, casAttempts)
	}
	if cap == nil {
		d.mu.Lock()
		d.dirty[sk] = s
		delete(d.cache, sk)
		d.mu.Unlock()
	}
	return err
}

// addTally counts delta in the adoption tally; false when not adopting.
func (d *Dir) addTally(sk string, s registry.DirScope, delta registry.DirHolding) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.adopting {
		return false
	}
	t := d.tally[sk]
	t.Owner = s
	t.Running = max(0, t.Running+delta.Running)
	t.Retained = max(0, t.Retained+delta.Retained)
	d.tally[sk] = t
	return true
}

// AdoptDone ends the adoption after a restart within the lease: what
// the registry adopted (and reserved or released since) becomes this
// node's counts, written now; a scope whose processes did not survive
// drops to zero.
func (d *Dir) AdoptDone(ctx context.Context) error {
	d.mu.Lock()
	if !d.adopting {
		d.mu.Unlock()
		return nil
	}
	d.adopting = false
	for sk, c := range d.mine {
		d.dirty[sk] = c.Owner
		if _, ok := d.tally[sk]; !ok {
			delete(d.mine, sk)
		}
	}
	for sk, t := range d.tally {
		d.dirty[sk] = t.Owner
		if t.Running == 0 && t.Retained == 0 {
			delete(d.mine, sk)
		} else {
			d.mine[sk] = t
		}
	}
	d.tally = nil
	d.mu.Unlock()
	d.kickLoad()
	return d.flushDirty(ctx)
}

func checkTotal(st *scopeState, delta registry.DirHolding, cap *registry.DirReservation) error {
	t := st.total()
	if t.Running+delta.Running > cap.MaxConcurrent {
		return fmt.Errorf("%w: %d of %d concurrent processes of this principal are running cluster-wide", registry.ErrQuota, t.Running, cap.MaxConcurrent)
	}
	if delta.Retained > 0 && t.Retained+delta.Retained > cap.MaxRetained {
		return fmt.Errorf("%w: %d of %d retained process IDs of this principal are in use cluster-wide; release exited processes", registry.ErrRegistryFull, t.Retained, cap.MaxRetained)
	}
	return nil
}

func (d *Dir) setMine(sk string, c scopeCount) {
	d.mu.Lock()
	if c.Running == 0 && c.Retained == 0 {
		delete(d.mine, sk)
	} else {
		d.mine[sk] = c
	}
	d.mu.Unlock()
	d.kickLoad()
}

// casCount writes this node's count of sk if the scope's gen is still
// st's; otherwise the same round trip returns the fresh state.
func (d *Dir) casCount(ctx context.Context, sk string, st *scopeState, c scopeCount, then []clientv3.Op) (bool, *scopeState, error) {
	put := clientv3.OpDelete(d.countKey(sk, d.node))
	if c.Running > 0 || c.Retained > 0 {
		b, _ := json.Marshal(c)
		put = clientv3.OpPut(d.countKey(sk, d.node), string(b), clientv3.WithLease(clientv3.LeaseID(d.lease.Load())))
	}
	resp, err := d.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(d.genKey(sk)), "=", st.genRev)},
		append([]clientv3.Op{clientv3.OpPut(d.genKey(sk), ""), put}, then...),
		[]clientv3.Op{clientv3.OpGet(d.genKey(sk)), clientv3.OpGet(d.countsKey(sk), clientv3.WithPrefix())})
	if err != nil {
		return false, st, unavailable("reserve", err)
	}
	if resp.Succeeded {
		nst := &scopeState{genRev: resp.Header.Revision, nodes: map[string]registry.DirHolding{}}
		for n, h := range st.nodes {
			nst.nodes[n] = h
		}
		nst.nodes[d.node] = c.DirHolding
		return true, nst, nil
	}
	gen := resp.Responses[0].GetResponseRange()
	counts := resp.Responses[1].GetResponseRange()
	nst, err := d.parseScope(sk, gen.Kvs, counts.Kvs)
	return false, nst, err
}

// fetchScope reads a scope's gen and counts.
func (d *Dir) fetchScope(ctx context.Context, sk string) (*scopeState, error) {
	resp, err := d.txn(ctx, nil, []clientv3.Op{clientv3.OpGet(d.genKey(sk)), clientv3.OpGet(d.countsKey(sk), clientv3.WithPrefix())}, nil)
	if err != nil {
		return nil, unavailable("read scope", err)
	}
	return d.parseScope(sk, resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
}

func (d *Dir) parseScope(sk string, gen, counts []*mvccpb.KeyValue) (*scopeState, error) {
	st := &scopeState{nodes: map[string]registry.DirHolding{}, fresh: true}
	if len(gen) > 0 {
		st.genRev = gen[0].ModRevision
	}
	prefix := d.countsKey(sk)
	for _, kv := range counts {
		var c scopeCount
		if err := decode(kv.Key, kv.Value, &c); err != nil {
			return nil, err
		}
		if c.Running < 0 || c.Retained < 0 {
			return nil, &registry.DirRecordError{Key: string(kv.Key), Reason: "negative count"}
		}
		st.nodes[strings.TrimPrefix(string(kv.Key), prefix)] = c.DirHolding
	}
	return st, nil
}

// decode parses one of our JSON values strictly: anything else under our
// keys is a DirRecordError naming the key.
func decode(key, val []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(val)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &registry.DirRecordError{Key: string(key), Reason: err.Error()}
	}
	// Not dec.More: it is false before a stray '}' or ']', so `{...}}`
	// passed as a record (found by FuzzDecodeRecord). Only the end may
	// follow the value.
	if _, err := dec.Token(); err != io.EOF {
		return &registry.DirRecordError{Key: string(key), Reason: "trailing data after the JSON value"}
	}
	return nil
}

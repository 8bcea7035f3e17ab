package etcddir

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capsule-host/capsule-host/registry"
)

// register takes the node's name under a lease: the earlier run's lease
// when it is still alive and still holds the name (a restart within the
// TTL), else a new lease and the name only if no live node holds it.
func (d *Dir) register(ctx context.Context, reuse int64) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*callBound)
	defer cancel()
	rec := d.nodeRecord()
	key := d.nodeKey(d.node)
	if reuse != 0 {
		ka, err := d.retake(ctx, reuse, rec)
		if err != nil {
			return nil, err
		}
		if ka != nil {
			d.setLease(reuse)
			if err := d.loadMine(ctx); err != nil {
				return nil, err
			}
			d.live.Store(true)
			d.clearGone(ctx)
			d.log.Info("cluster node re-registered within its lease: records and counts kept", "node", d.node)
			return ka, nil
		}
	}
	g, err := d.cli.Grant(ctx, int64(d.cfg.TTL/time.Second))
	if err != nil {
		return nil, unavailable("grant lease", err)
	}
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, rec, clientv3.WithLease(g.ID))).Commit()
	if err != nil {
		return nil, unavailable("register node", err)
	}
	if !resp.Succeeded {
		d.cli.Revoke(ctx, g.ID)
		return nil, fmt.Errorf("%w: node %q is registered by another live node (its lease has not expired)", registry.ErrNodeNameTaken, d.node)
	}
	d.setLease(int64(g.ID))
	if err := d.rewriteMine(ctx); err != nil {
		return nil, err
	}
	ka, err := d.cli.KeepAlive(context.Background(), g.ID)
	if err != nil {
		return nil, unavailable("keep lease alive", err)
	}
	d.live.Store(true)
	d.clearGone(ctx)
	d.log.Info("cluster node registered", "node", d.node, "lease_ttl", d.cfg.TTL)
	return ka, nil
}

// nodeRecord is this node's record as registered now.
func (d *Dir) nodeRecord() string {
	rec, _ := json.Marshal(NodeRecord{Name: d.node, Address: d.cfg.Address, Capacity: d.cfg.Capacity, Version: d.cfg.Version, Started: time.Now().UTC()})
	return string(rec)
}

// retake keeps the node's record under lease id if etcd still holds it
// there, and keeps id alive: nil, nil when the lease is gone.
func (d *Dir) retake(ctx context.Context, id int64, rec string) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	key, lid := d.nodeKey(d.node), clientv3.LeaseID(id)
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", lid)).
		Then(clientv3.OpPut(key, rec, clientv3.WithLease(lid))).Commit()
	if err != nil {
		return nil, unavailable("register node", err)
	}
	if !resp.Succeeded {
		return nil, nil
	}
	ka, err := d.cli.KeepAlive(context.Background(), lid)
	if err != nil {
		return nil, nil
	}
	return ka, nil
}

// resume is the first step of a re-registration in the same run: the
// keep-alive gave up (etcd unreachable for a TTL, as the client counts
// it), but etcd may still hold the lease (a restarted etcd revives its
// leases for a TTL). Then nothing was lost: the node keeps its lease,
// records and counts. A new lease instead would wait for the old one to
// expire (the name is taken until then) and, when it does, this node's
// counts and record vanish and its processes read as lost elsewhere.
func (d *Dir) resume(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	id := d.lease.Load()
	if id == 0 {
		return nil, nil
	}
	rec := d.nodeRecord()
	ka, err := d.retake(ctx, id, rec)
	if ka == nil || err != nil {
		return nil, err
	}
	if err := d.flushDirty(ctx); err != nil {
		d.log.Warn("cluster counts not yet rewritten", "node", d.node, "err", err)
	}
	d.live.Store(true)
	d.log.Info("cluster lease resumed: etcd still held it (records and counts kept)", "node", d.node)
	return ka, nil
}

// loadMine reads back this node's counts (a restart within the lease)
// and starts the adoption: the counts stay in etcd as they are (the
// earlier run's processes may all still run) until the registry's Adopt
// has counted what it took back (AdoptDone).
func (d *Dir) loadMine(ctx context.Context) error {
	resp, err := d.cli.Get(ctx, d.prefix+"scopes/", clientv3.WithPrefix())
	if err != nil {
		return unavailable("read counts", err)
	}
	suffix := "/n/" + d.node
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if !strings.HasSuffix(k, suffix) {
			continue
		}
		var c scopeCount
		if err := decode(kv.Key, kv.Value, &c); err != nil {
			return err
		}
		sk := strings.TrimSuffix(strings.TrimPrefix(k, d.prefix+"scopes/"), suffix)
		d.mine[sk] = c
	}
	d.adopting, d.tally = true, map[string]scopeCount{}
	return nil
}

// rewriteMine writes everything this node holds under its (new) lease:
// after a lost lease its counts vanished with it, its processes did not.
func (d *Dir) rewriteMine(ctx context.Context) error {
	d.mu.Lock()
	for sk, c := range d.mine {
		d.dirty[sk] = c.Owner
	}
	recs := make([]registry.DirProcess, 0, len(d.published))
	for _, p := range d.published {
		recs = append(recs, p)
	}
	d.mu.Unlock()
	if err := d.flushDirty(ctx); err != nil {
		return err
	}
	for _, p := range recs {
		if err := d.Publish(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// flushDirty rewrites this node's count of every dirty scope from mine.
func (d *Dir) flushDirty(ctx context.Context) error {
	d.mu.Lock()
	owners := make([]registry.DirScope, 0, len(d.dirty))
	for _, s := range d.dirty {
		owners = append(owners, s)
	}
	d.mu.Unlock()
	for _, s := range owners {
		if err := d.change(ctx, s, registry.DirHolding{}, nil); err != nil {
			return err
		}
	}
	return nil
}

// keepAlive drains the lease's keep-alive channel; when it closes (the
// lease expired: etcd was unreachable for a TTL, or this node was
// partitioned) the node stops accepting spawns and re-registers, bounded
// retries until Close, before it serves spawns again.
func (d *Dir) keepAlive(ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(d.done)
	tick := time.NewTicker(d.cfg.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-d.stop:
			return
		case _, ok := <-ka:
			if ok {
				continue
			}
			d.live.Store(false)
			d.log.Warn("cluster lease lost: new spawns refused until this node re-registers", "node", d.node)
			if ka = d.reregister(); ka == nil {
				return
			}
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			if err := d.flushDirty(ctx); err != nil {
				d.log.Warn("cluster counts not yet rewritten", "node", d.node, "err", err)
			}
			cancel()
			d.kickLoad() // a load write that failed, or lost with a lease
		}
	}
}

// reregister retries register until it succeeds or Close; nil on Close.
func (d *Dir) reregister() <-chan *clientv3.LeaseKeepAliveResponse {
	wait := 200 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*callBound)
		ka, err := d.resume(ctx)
		if ka == nil && err == nil {
			ka, err = d.register(ctx, 0)
		}
		cancel()
		if err == nil {
			return ka
		}
		d.log.Warn("cluster re-registration failed", "node", d.node, "err", err)
		select {
		case <-d.stop:
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, d.cfg.TTL)
	}
}

func (d *Dir) setLease(id int64) {
	d.lease.Store(id)
	if d.cfg.OnLease != nil {
		d.cfg.OnLease(id)
	}
}

// clearGone deletes this node's gone mark (it is back: a later absence
// starts a new grace). A failure only shortens a later grace: logged.
func (d *Dir) clearGone(ctx context.Context) {
	if err := d.del(ctx, d.goneKey(d.node)); err != nil {
		d.log.Warn("cluster: this node's gone mark not cleared", "node", d.node, "err", err)
	}
}

package etcddir

import (
	"context"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Garbage collection of a node that never returns. Its counts vanished
// with its lease; its process records (no lease, so that they read as
// lost rather than unknown) would stay forever. Every live node sweeps:
// the first to see records of an unregistered node marks it
// P gone/<node> = the time it was first seen gone (a create-if-absent:
// one mark cluster-wide, surviving the sweeper's restart); once the mark
// is LostGrace old, any sweeper deletes that node's records, each only
// if it was not rewritten since it was read (a node that came back and
// re-published keeps its records). A node deletes its own mark when it
// registers. Until the deletion the records read as lost.

// DefaultLostGrace is how long a gone node's records stay readable as
// lost.
const DefaultLostGrace = time.Hour

func (d *Dir) goneKey(n string) string { return d.prefix + "gone/" + n }

// sweepEvery is how often a node sweeps: a quarter of the grace, within
// [1 s, 5 min] (a sweep reads every process record).
func sweepEvery(grace time.Duration) time.Duration {
	return min(max(grace/4, time.Second), 5*time.Minute)
}

// sweeper runs sweep until Close.
func (d *Dir) sweeper() {
	defer close(d.sweepDone)
	t := time.NewTicker(sweepEvery(d.cfg.LostGrace))
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*callBound)
		if n, err := d.sweep(ctx, time.Now()); err != nil {
			d.log.Warn("cluster sweep of gone nodes failed", "node", d.node, "err", err)
		} else if n > 0 {
			d.log.Info("cluster sweep: deleted the records of nodes gone longer than the grace", "records", n, "grace", d.cfg.LostGrace)
		}
		cancel()
	}
}

// sweep marks gone nodes and deletes the records of those gone longer
// than the grace; it returns how many records it deleted.
func (d *Dir) sweep(ctx context.Context, now time.Time) (int, error) {
	resp, err := d.txn(ctx, nil, []clientv3.Op{
		clientv3.OpGet(d.prefix+"nodes/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(d.prefix+"gone/", clientv3.WithPrefix()),
		clientv3.OpGet(d.prefix+"procs/", clientv3.WithPrefix()),
	}, nil)
	if err != nil {
		return 0, unavailable("sweep", err)
	}
	live := map[string]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		live[strings.TrimPrefix(string(kv.Key), d.prefix+"nodes/")] = true
	}
	gone := map[string]time.Time{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		ms, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			d.log.Warn("cluster sweep: unreadable gone mark, rewritten", "key", string(kv.Key))
			ms = now.UnixMilli()
		}
		gone[strings.TrimPrefix(string(kv.Key), d.prefix+"gone/")] = time.UnixMilli(ms)
	}
	deleted := 0
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		var v procValue
		if err := decode(kv.Key, kv.Value, &v); err != nil {
			d.log.Warn("cluster sweep: unreadable process record left alone", "err", err)
			continue
		}
		if live[v.Node] {
			continue
		}
		since, marked := gone[v.Node]
		if !marked {
			if err := d.markGone(ctx, v.Node, now); err != nil {
				return deleted, err
			}
			gone[v.Node] = now
			continue
		}
		if now.Sub(since) < d.cfg.LostGrace {
			continue
		}
		r, err := d.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)},
			[]clientv3.Op{clientv3.OpDelete(string(kv.Key))}, nil)
		if err != nil {
			return deleted, unavailable("sweep delete", err)
		}
		if r.Succeeded {
			deleted++
		}
	}
	return deleted, nil
}

// markGone records when node was first seen gone, unless a mark exists
// (another sweeper's, or an unreadable one: then it is rewritten).
func (d *Dir) markGone(ctx context.Context, node string, now time.Time) error {
	k := d.goneKey(node)
	_, err := d.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(k, strconv.FormatInt(now.UnixMilli(), 10))}, nil)
	return unavailableIf("mark node gone", err)
}

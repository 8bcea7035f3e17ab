package etcddir

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capsule-host/capsule-host/registry"
)

// Each node publishes its load — the processes of both tiers it holds a
// concurrent slot for, the sum of its per-scope counts — under
// P load/<node>, under its lease, for placement. It is written by one
// goroutine after a change, at most every loadGap, so a reservation pays
// no extra round trip and a busy node adds at most 2 writes/s; placement reads it a write late, and the chosen node
// refuses beyond its capacity (placement then tries the next).

// loadGap bounds the load writes of one node to 2/s, whatever its spawn
// rate (placement tolerates the lag: a full node refuses for itself).
const loadGap = 500 * time.Millisecond

type loadValue struct {
	Running  int `json:"running"`
	Retained int `json:"retained"`
}

func (d *Dir) loadKey(n string) string { return d.prefix + "load/" + n }

// kickLoad asks the load writer to publish (never blocks).
func (d *Dir) kickLoad() {
	select {
	case d.loadKick <- struct{}{}:
	default:
	}
}

// myLoad sums this node's counts.
func (d *Dir) myLoad() loadValue {
	d.mu.Lock()
	defer d.mu.Unlock()
	var l loadValue
	for _, c := range d.mine {
		l.Running += c.Running
		l.Retained += c.Retained
	}
	return l
}

// loadWriter publishes this node's load whenever it is kicked, until
// Close; a failed write is retried on the next kick (the keep-alive tick
// kicks too).
func (d *Dir) loadWriter() {
	defer close(d.loadDone)
	last, lastLease := loadValue{}, int64(0)
	for {
		select {
		case <-d.stop:
			return
		case <-d.loadKick:
		}
		l, lease := d.myLoad(), d.lease.Load()
		if (l == last && lease == lastLease) || !d.live.Load() {
			continue // unchanged; or no lease: re-registration kicks again
		}
		b, _ := json.Marshal(l)
		ctx, cancel := context.WithTimeout(context.Background(), callBound)
		err := d.put(ctx, d.loadKey(d.node), string(b), clientv3.WithLease(clientv3.LeaseID(lease)))
		cancel()
		if err != nil {
			d.log.Warn("cluster load not published", "node", d.node, "err", err)
			continue
		}
		last, lastLease = l, lease
		select { // at most one load write per loadGap: kicks meanwhile coalesce
		case <-d.stop:
			return
		case <-time.After(loadGap):
		}
	}
}

// LiveNodes is every registered node with its capacity and last
// published load, by name (one read of two prefixes).
func (d *Dir) LiveNodes(ctx context.Context) ([]registry.DirNode, error) {
	resp, err := d.txn(ctx, nil, []clientv3.Op{
		clientv3.OpGet(d.prefix+"nodes/", clientv3.WithPrefix()),
		clientv3.OpGet(d.prefix+"load/", clientv3.WithPrefix()),
	}, nil)
	if err != nil {
		return nil, unavailable("list nodes", err)
	}
	loads := map[string]loadValue{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var l loadValue
		if err := decode(kv.Key, kv.Value, &l); err != nil {
			return nil, err
		}
		loads[strings.TrimPrefix(string(kv.Key), d.prefix+"load/")] = l
	}
	var out []registry.DirNode
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var n NodeRecord
		if err := decode(kv.Key, kv.Value, &n); err != nil {
			return nil, err
		}
		out = append(out, registry.DirNode{Name: n.Name, Capacity: n.Capacity, Running: loads[n.Name].Running})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Holders is the other nodes whose count of s is not zero (a fresh read:
// a cluster-wide list must not miss a node).
func (d *Dir) Holders(ctx context.Context, s registry.DirScope) ([]string, error) {
	st, err := d.fetchScope(ctx, scopeKey(s))
	if err != nil {
		return nil, err
	}
	var out []string
	for n, h := range st.nodes {
		if n != d.node && (h.Running > 0 || h.Retained > 0) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

package etcddir

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capsule-host/capsule-host/registry"
)

// Publish writes a process's record (no lease: see the package comment).
func (d *Dir) Publish(ctx context.Context, p registry.DirProcess) error {
	if err := retry(ctx, func(ctx context.Context) error { _, e := d.cli.Do(ctx, d.publishOp(p)); return e }); err != nil {
		return unavailable("publish process", err)
	}
	d.mu.Lock()
	d.published[p.Key] = p
	d.mu.Unlock()
	return nil
}

// publishOp writes p's record.
func (d *Dir) publishOp(p registry.DirProcess) clientv3.Op {
	b, _ := json.Marshal(procValue{Owner: p.Owner, Node: p.Node, Label: p.Label})
	return clientv3.OpPut(d.procKey(p.Key), string(b))
}

// Unpublish deletes a process's record.
func (d *Dir) Unpublish(ctx context.Context, key [32]byte) error {
	d.mu.Lock()
	delete(d.published, key)
	d.mu.Unlock()
	return unavailableIf("unpublish process", d.del(ctx, d.procKey(key)))
}

// Lookup reads a process's record and whether its node is still
// registered (Lost when not: its lease expired).
func (d *Dir) Lookup(ctx context.Context, key [32]byte) (registry.DirProcess, error) {
	resp, err := d.get(ctx, d.procKey(key))
	if err != nil {
		return registry.DirProcess{}, unavailable("lookup", err)
	}
	if len(resp.Kvs) == 0 {
		return registry.DirProcess{}, registry.ErrNoSuchProcess
	}
	var v procValue
	if err := decode(resp.Kvs[0].Key, resp.Kvs[0].Value, &v); err != nil {
		return registry.DirProcess{}, err
	}
	p := registry.DirProcess{Key: key, Owner: v.Owner, Node: v.Node, Label: v.Label}
	if v.Node != d.node {
		nr, err := d.get(ctx, d.nodeKey(v.Node), clientv3.WithCountOnly())
		if err != nil {
			return registry.DirProcess{}, unavailable("lookup node", err)
		}
		p.Lost = nr.Count == 0
	}
	return p, nil
}

// Nodes lists the registered (live) nodes by name.
func (d *Dir) Nodes(ctx context.Context) ([]NodeRecord, error) {
	resp, err := d.get(ctx, d.prefix+"nodes/", clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable("list nodes", err)
	}
	out := make([]NodeRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var n NodeRecord
		if err := decode(kv.Key, kv.Value, &n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var _ registry.Directory = (*Dir)(nil)

// NodeAddress is where a live node is reached; ErrUnavailable naming it
// when it is not registered (its lease expired).
func (d *Dir) NodeAddress(ctx context.Context, node string) (string, error) {
	resp, err := d.get(ctx, d.nodeKey(node))
	if err != nil {
		return "", unavailable("node address", err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("%w: node %q is not registered", registry.ErrUnavailable, node)
	}
	var n NodeRecord
	if err := decode(resp.Kvs[0].Key, resp.Kvs[0].Value, &n); err != nil {
		return "", err
	}
	return n.Address, nil
}

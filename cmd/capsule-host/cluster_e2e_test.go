package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/api"
	"github.com/capsule-host/capsule-host/registry/etcddir/etcdtest"
)

// clusterNode is one daemon of a test cluster.
type clusterNode struct {
	name string
	dir  string
	d    *daemonProc
	c    *api.Client
}

// startCluster runs one daemon per name on one real etcd, all with the
// same cluster key, a lease TTL of ttl and the test's quotas.
func startCluster(t *testing.T, names []string, ttl string) ([]*clusterNode, *etcdtest.Cluster, string) {
	t.Helper()
	bin := builtBinary(t)
	ec := etcdtest.Start(t, 1)
	root := t.TempDir()
	var secret [32]byte
	rand.Read(secret[:])
	key := filepath.Join(root, "cluster.key")
	if err := os.WriteFile(key, []byte(hex.EncodeToString(secret[:])), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("cluster-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	var ns []*clusterNode
	for _, n := range names {
		dir := filepath.Join(root, n)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		toml := fmt.Sprintf("[quotas]\nmax_concurrent = 8\nmax_retained = 32\n\n[cluster]\nurl = %q\nnode = %q\nkey_file = %q\nlease_ttl = %q\n", ec.URL()+"/e2e", n, key, ttl)
		if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(toml), 0o600); err != nil {
			t.Fatal(err)
		}
		cn := &clusterNode{name: n, dir: dir, c: api.NewUnix(filepath.Join(dir, "d.sock"))}
		cn.d = startServe(t, bin, dir, "--on-shutdown", "stop")
		awaitServing(t, cn.c, cn.d)
		ns = append(ns, cn)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range ns {
				b, _ := os.ReadFile(filepath.Join(n.dir, "daemon.log"))
				t.Logf("daemon %s log:\n%s", n.name, b)
			}
		}
	})
	return ns, ec, mark
}

// toolErr calls a shell tool and returns the daemon's error message, ""
// on success.
func toolErr(t *testing.T, c *api.Client, principal, tool string, in any) (map[string]any, string) {
	t.Helper()
	b, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Call(ctx, api.CallRequest{Capsule: "shell", Tool: tool, Input: b, Principal: principal})
	var ae *api.Error
	if errors.As(err, &ae) {
		return nil, ae.Code + ": " + ae.Message
	}
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	m := map[string]any{}
	json.Unmarshal(res.Output, &m)
	return m, ""
}

// TestClusterThreeDaemons: three daemons on one etcd. `nodes` lists them;
// 100 concurrent spawns spread across the three against a cap of 8 start
// exactly 8 processes; a process is known on every node (held elsewhere:
// unavailable naming its node, never no-such-process) and another
// principal gets no-such-process on every node.
func TestClusterThreeDaemons(t *testing.T) {
	skipSameBinary(t)
	ns, _, mark := startCluster(t, []string{"a", "b", "c"}, "5s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := ns[0].c.Nodes(ctx)
	if err != nil || len(l.Nodes) != 3 || l.Nodes[0].Name != "a" || !l.Nodes[0].Self || l.Nodes[2].Name != "c" {
		t.Fatalf("nodes: %+v %v", l, err)
	}
	if h, err := ns[1].c.Health(ctx); err != nil || h.Cluster != "ok (node b)" {
		t.Fatalf("health: %+v %v", h, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	var holders []int
	var refused []string
	for i := range 100 {
		wg.Go(func() {
			m, e := toolErr(t, ns[i%3].c, "alice", "spawn_background_process", map[string]any{"command": "sleep 1000 # " + mark})
			mu.Lock()
			defer mu.Unlock()
			if e != "" {
				refused = append(refused, e)
				return
			}
			id, _ := m["id"].(string)
			ids, holders = append(ids, id), append(holders, i%3)
		})
	}
	wg.Wait()
	if len(ids) != 8 || len(refused) != 92 {
		t.Fatalf("%d spawned, %d refused, want 8 and 92; refusals: %q", len(ids), len(refused), refused[:min(3, len(refused))])
	}
	t.Logf("a refusal: %s", refused[0])
	if n := len(shells(withMarker(mark))); n != 8 {
		t.Fatalf("%d processes alive, want 8", n)
	}
	h := holders[0]
	for i, n := range ns {
		if _, e := toolErr(t, n.c, "mallory", "read_process_logs", map[string]any{"id": ids[0]}); !isNoSuchProcess(e) {
			t.Errorf("another principal through %s: %q, want no-such-process", n.name, e)
		}
		if i == h {
			continue
		}
		if _, e := toolErr(t, n.c, "alice", "read_process_logs", map[string]any{"id": ids[0]}); e == "" || isNoSuchProcess(e) {
			t.Errorf("the owner through %s of a process held by %s: %q, want unavailable naming it", n.name, ns[h].name, e)
		} else {
			t.Logf("through %s: %s", n.name, e)
		}
	}
	for _, n := range ns {
		endServe(t, n.d)
	}
	waitNoMarked(t, mark, 30*time.Second)
}

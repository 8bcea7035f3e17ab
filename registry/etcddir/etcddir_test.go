package etcddir

import (
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/etcddir/etcdtest"
)

var scope = registry.DirScope{Capsule: "shell", Principal: "alice"}

func open(t testing.TB, c *etcdtest.Cluster, node string, ttl time.Duration, lease int64) *Dir {
	t.Helper()
	d, err := Open(etcdtest.Context(t, 20*time.Second), Config{Endpoints: c.Endpoints(), Prefix: "/t/" + t.Name() + "/", Node: node, Address: "127.0.0.1:1", Capacity: 8, Version: "test", TTL: ttl, LeaseID: lease})
	if err != nil {
		t.Fatalf("open %s: %v", node, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func res(persistent bool) registry.DirReservation {
	return registry.DirReservation{Scope: scope, Persistent: persistent, MaxConcurrent: 8, MaxRetained: 32}
}

// total reads the scope's cluster-wide counts from etcd.
func total(t testing.TB, d *Dir) registry.DirHolding {
	t.Helper()
	st, err := d.fetchScope(etcdtest.Context(t, 10*time.Second), scopeKey(scope))
	if err != nil {
		t.Fatalf("read scope: %v", err)
	}
	return st.total()
}

// TestReserveCapAcrossNodes: 100 concurrent reservations spread over three
// nodes against a cap of 8 give exactly 8, the rest ErrQuota.
func TestReserveCapAcrossNodes(t *testing.T) {
	c := etcdtest.Start(t, 1)
	nodes := []*Dir{open(t, c, "a", 0, 0), open(t, c, "b", 0, 0), open(t, c, "c", 0, 0)}
	ctx := etcdtest.Context(t, 60*time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[*Dir]int{}
	ok, quota := 0, 0
	for i := range 100 {
		d := nodes[i%3]
		wg.Go(func() {
			err := d.Reserve(ctx, res(true))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
				got[d]++
			case errors.Is(err, registry.ErrQuota):
				quota++
			default:
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 8 || quota != 92 {
		t.Fatalf("ok=%d quota=%d, want 8 and 92", ok, quota)
	}
	if tt := total(t, nodes[0]); tt.Running != 8 || tt.Retained != 8 {
		t.Fatalf("etcd total %+v, want 8/8", tt)
	}
	for d, n := range got {
		for range n {
			if err := d.Release(ctx, scope, 1, 1); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
	}
	if tt := total(t, nodes[0]); tt != (registry.DirHolding{}) {
		t.Fatalf("after release %+v, want zero", tt)
	}
	if err := nodes[1].Reserve(ctx, res(false)); err != nil {
		t.Fatalf("reserve after release: %v", err)
	}
}

// TestLeaseExpiryReclaims: a node that stops renewing (killed: Close
// without revoke) gives its unspent reservations back when its lease
// expires; its process records then read as lost.
func TestLeaseExpiryReclaims(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := open(t, c, "a", 0, 0)
	b := open(t, c, "b", 2*time.Second, 0)
	ctx := etcdtest.Context(t, 60*time.Second)
	for range 8 {
		if err := b.Reserve(ctx, res(true)); err != nil {
			t.Fatal(err)
		}
	}
	key := [32]byte{1, 2, 3}
	if err := b.Publish(ctx, registry.DirProcess{Key: key, Owner: scope, Node: "b", Label: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve(ctx, res(false)); !errors.Is(err, registry.ErrQuota) {
		t.Fatalf("a reserve with b full: %v, want quota", err)
	}
	if p, err := a.Lookup(ctx, key); err != nil || p.Node != "b" || p.Lost {
		t.Fatalf("lookup while b lives: %+v %v", p, err)
	}
	b.Close() // b "dies": no revoke, no renewal
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := a.Reserve(ctx, res(false))
		if err == nil {
			break
		}
		if !errors.Is(err, registry.ErrQuota) || time.Now().After(deadline) {
			t.Fatalf("reserve after b's lease expiry: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p, err := a.Lookup(ctx, key); err != nil || !p.Lost {
		t.Fatalf("lookup after b's expiry: %+v %v, want lost", p, err)
	}
}

// TestNodeNameClaim: a second node claiming a live node's name is
// refused; the node itself restarting within its lease keeps the name.
func TestNodeNameClaim(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := open(t, c, "a", 0, 0)
	_, err := Open(etcdtest.Context(t, 20*time.Second), Config{Endpoints: c.Endpoints(), Prefix: "/t/" + t.Name() + "/", Node: "a"})
	if !errors.Is(err, registry.ErrNodeNameTaken) || !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("claiming a live name: %v, want ErrNodeNameTaken", err)
	}
	lease := a.LeaseID()
	a.Close()
	a2 := open(t, c, "a", 0, lease)
	if a2.LeaseID() != lease {
		t.Fatalf("restart within the lease got lease %x, want %x", a2.LeaseID(), lease)
	}
}

// TestGarbageValues: values under our keys written by something else give
// a *DirRecordError naming the key, never a panic.
func TestGarbageValues(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := open(t, c, "a", 0, 0)
	ctx := etcdtest.Context(t, 30*time.Second)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ck := a.countKey(scopeKey(scope), "intruder")
	pk := a.procKey([32]byte{9})
	for _, kv := range [][2]string{{ck, "\x00garbage{"}, {pk, `{"owner":1}`}} {
		if _, err := cli.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	var re *registry.DirRecordError
	if err := a.Reserve(ctx, res(false)); !errors.As(err, &re) || re.Key != ck || !errors.Is(err, registry.ErrInternal) {
		t.Fatalf("reserve over garbage: %v, want DirRecordError naming %s", err, ck)
	}
	if _, err := a.Lookup(ctx, [32]byte{9}); !errors.As(err, &re) || re.Key != pk {
		t.Fatalf("lookup of garbage: %v, want DirRecordError naming %s", err, pk)
	}
	if _, err := cli.Put(ctx, ck, `{"running":-3,"retained":0,"owner":{"capsule":"x","principal":"y"}}`); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve(ctx, res(false)); !errors.As(err, &re) || re.Key != ck {
		t.Fatalf("reserve over a negative count: %v, want DirRecordError", err)
	}
	if _, err := cli.Put(ctx, a.nodeKey("zz"), "nope"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Nodes(ctx); !errors.As(err, &re) || re.Key != a.nodeKey("zz") {
		t.Fatalf("nodes over garbage: %v", err)
	}
}

// TestEtcdDown: with etcd stopped a reservation fails with ErrUnavailable
// within its bound; when etcd returns, reservations work again.
func TestEtcdDown(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := open(t, c, "a", 5*time.Second, 0)
	ctx := etcdtest.Context(t, 90*time.Second)
	if err := a.Reserve(ctx, res(true)); err != nil {
		t.Fatal(err)
	}
	c.Kill(c.Members[0])
	start := time.Now()
	if err := a.Reserve(ctx, res(true)); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("reserve with etcd down: %v, want unavailable", err)
	}
	if err := a.Release(ctx, scope, 1, 1); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("release with etcd down: %v, want unavailable (kept dirty)", err)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("calls with etcd down took %v: unbounded", time.Since(start))
	}
	c.Restart(c.Members[0])
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := a.Reserve(ctx, res(true))
		if err == nil {
			break
		}
		if !errors.Is(err, registry.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("reserve after etcd returned: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The release that failed while etcd was down was rewritten: one held.
	deadline = time.Now().Add(30 * time.Second)
	for tt := total(t, a); tt != (registry.DirHolding{Running: 1, Retained: 1}); tt = total(t, a) {
		if time.Now().After(deadline) {
			t.Fatalf("total %+v, want 1/1 after recovery", tt)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMemberLoss: a three-member etcd losing its leader does not affect
// reservations: the election that follows (etcd answers "leader changed"
// meanwhile) is retried through, not reported as an outage.
func TestMemberLoss(t *testing.T) {
	c := etcdtest.Start(t, 3)
	a := open(t, c, "a", 0, 0)
	ctx := etcdtest.Context(t, 60*time.Second)
	c.Kill(c.Leader())
	for i := range 8 {
		if err := a.Reserve(ctx, res(false)); err != nil {
			t.Fatalf("reserve %d with one member down: %v", i, err)
		}
	}
	if err := a.Reserve(ctx, res(false)); !errors.Is(err, registry.ErrQuota) {
		t.Fatalf("ninth: %v, want quota", err)
	}
}

// TestRestartWithinLeaseHoldsCounts: a node restarting within its lease
// keeps its earlier counts in etcd until its registry has adopted what
// survived (AdoptDone), so no other node can over-reserve in between;
// then the counts are exactly what was adopted.
func TestRestartWithinLeaseHoldsCounts(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := open(t, c, "a", 0, 0)
	b := open(t, c, "b", 0, 0)
	ctx := etcdtest.Context(t, 60*time.Second)
	for range 8 {
		if err := b.Reserve(ctx, res(true)); err != nil {
			t.Fatal(err)
		}
	}
	lease := b.LeaseID()
	b.Close() // b's daemon stops; its lease lives on
	b2 := open(t, c, "b", 0, lease)
	if err := a.Reserve(ctx, res(false)); !errors.Is(err, registry.ErrQuota) {
		t.Fatalf("a reserving while b adopts: %v, want quota (b's earlier 8 still count)", err)
	}
	// b's registry adopts 5 survivors (3 died while it was down); one of
	// them exits during the adoption.
	if err := b2.Adopt(ctx, scope, registry.DirHolding{Running: 5, Retained: 5}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b2.Release(ctx, scope, 1, 0); err != nil {
		t.Fatal(err)
	}
	if tt := total(t, a); tt.Running != 8 || tt.Retained != 8 {
		t.Fatalf("etcd during the adoption: %+v, want the earlier 8/8", tt)
	}
	if err := b2.AdoptDone(ctx); err != nil {
		t.Fatal(err)
	}
	if tt := total(t, a); tt.Running != 4 || tt.Retained != 5 {
		t.Fatalf("etcd after the adoption: %+v, want 4 running, 5 retained", tt)
	}
	for i := range 5 {
		err := a.Reserve(ctx, res(false))
		if i < 4 && err != nil {
			t.Fatalf("reserve %d after b adopted: %v", i+1, err)
		}
		if i == 4 && !errors.Is(err, registry.ErrQuota) {
			t.Fatalf("reserve beyond the cap: %v, want quota", err)
		}
	}
}

// TestEtcdDownPastTTL: etcd down for longer than the lease TTL (the
// client gives the keep-alive up: no lease, spawns refused). A restarted
// etcd revives its leases, so when it returns the node resumes the same
// lease: records and counts intact, health back within seconds, instead
// of waiting for the revived lease to expire under a name it holds (and
// its counts and record vanishing with it).
func TestEtcdDownPastTTL(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := open(t, c, "a", 5*time.Second, 0)
	ctx := etcdtest.Context(t, 120*time.Second)
	if err := a.Reserve(ctx, res(true)); err != nil {
		t.Fatal(err)
	}
	lease := a.LeaseID()
	c.Kill(c.Members[0])
	for end := time.Now().Add(60 * time.Second); a.live.Load(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the keep-alive did not give up within 60 s of etcd's stop")
		}
	}
	c.Restart(c.Members[0])
	back := time.Now()
	for end := back.Add(30 * time.Second); a.Health(ctx) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no lease 30 s after etcd returned: %v", a.Health(ctx))
		}
	}
	t.Logf("healthy %v after etcd returned", time.Since(back))
	if a.LeaseID() != lease {
		t.Fatalf("lease %x after etcd returned, want the same %x resumed", a.LeaseID(), lease)
	}
	if tt := total(t, a); tt != (registry.DirHolding{Running: 1, Retained: 1}) {
		t.Fatalf("total %+v after the resume, want 1/1 kept", tt)
	}
}

package etcddir

import (
	"errors"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/etcddir/etcdtest"
)

func openGrace(t testing.TB, c *etcdtest.Cluster, node string, grace time.Duration) *Dir {
	t.Helper()
	d, err := Open(etcdtest.Context(t, 20*time.Second), Config{Endpoints: c.Endpoints(), Prefix: "/t/" + t.Name() + "/", Node: node, Address: "127.0.0.1:1", Capacity: 8, LostGrace: grace})
	if err != nil {
		t.Fatalf("open %s: %v", node, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestSweepGoneNode: the records of a node whose lease is gone read as
// lost through the grace, then a sweep deletes them (no-such-process);
// a live node's records are never touched, and a node that comes back
// within the grace keeps its re-published records.
func TestSweepGoneNode(t *testing.T) {
	c := etcdtest.Start(t, 1)
	const grace = time.Hour // the sweeps below are driven with explicit clocks
	a := openGrace(t, c, "a", grace)
	b := openGrace(t, c, "b", grace)
	ctx := etcdtest.Context(t, 60*time.Second)
	ka, kb, kb2 := [32]byte{1}, [32]byte{2}, [32]byte{3}
	for _, p := range []struct {
		d *Dir
		k [32]byte
	}{{a, ka}, {b, kb}, {b, kb2}} {
		if err := p.d.Publish(ctx, registry.DirProcess{Key: p.k, Owner: scope, Node: p.d.Node(), Label: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Revoke(ctx); err != nil { // b's lease ends: as if it expired
		t.Fatal(err)
	}
	t0 := time.Now()
	for i, now := range []time.Time{t0, t0.Add(grace - time.Second)} {
		if n, err := a.sweep(ctx, now); err != nil || n != 0 {
			t.Fatalf("sweep %d within the grace: deleted %d, %v", i, n, err)
		}
		if p, err := a.Lookup(ctx, kb); err != nil || !p.Lost || p.Node != "b" {
			t.Fatalf("b's record within the grace: %+v %v, want lost on b", p, err)
		}
	}
	if n, err := a.sweep(ctx, t0.Add(grace)); err != nil || n != 2 {
		t.Fatalf("sweep after the grace: deleted %d, %v; want b's 2 records", n, err)
	}
	for _, k := range [][32]byte{kb, kb2} {
		if _, err := a.Lookup(ctx, k); !errors.Is(err, registry.ErrNoSuchProcess) {
			t.Fatalf("b's record after the sweep: %v, want no-such-process", err)
		}
	}
	if p, err := a.Lookup(ctx, ka); err != nil || p.Lost {
		t.Fatalf("a's own record after the sweep: %+v %v", p, err)
	}

	// c goes, is marked, comes back within the grace and re-publishes:
	// a later sweep (even past the first mark's grace) keeps its record.
	cd := openGrace(t, c, "c", grace)
	kc := [32]byte{4}
	if err := cd.Publish(ctx, registry.DirProcess{Key: kc, Owner: scope, Node: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := cd.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	cd.Close()
	if _, err := a.sweep(ctx, t0); err != nil { // marks c gone
		t.Fatal(err)
	}
	back := openGrace(t, c, "c", grace) // clears the mark
	if err := back.Publish(ctx, registry.DirProcess{Key: kc, Owner: scope, Node: "c"}); err != nil {
		t.Fatal(err)
	}
	if n, err := a.sweep(ctx, t0.Add(2*grace)); err != nil || n != 0 {
		t.Fatalf("sweep with c back: deleted %d, %v; want 0", n, err)
	}
	if p, err := a.Lookup(ctx, kc); err != nil || p.Lost {
		t.Fatalf("c's record after it came back: %+v %v", p, err)
	}
}

// TestSweeperRuns: with a short grace the background sweeper alone
// deletes a gone node's record (lost first, then no-such-process).
func TestSweeperRuns(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := openGrace(t, c, "a", 1500*time.Millisecond)
	b := openGrace(t, c, "b", time.Hour)
	ctx := etcdtest.Context(t, 60*time.Second)
	k := [32]byte{9}
	if err := b.Publish(ctx, registry.DirProcess{Key: k, Owner: scope, Node: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	sawLost := false
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p, err := a.Lookup(ctx, k)
		if errors.Is(err, registry.ErrNoSuchProcess) {
			break
		}
		if err != nil || !p.Lost || time.Now().After(deadline) {
			t.Fatalf("b's record: %+v %v (want lost, then deleted within the deadline)", p, err)
		}
		sawLost = true
	}
	if !sawLost {
		t.Fatal("the record was never read as lost before its deletion")
	}
}

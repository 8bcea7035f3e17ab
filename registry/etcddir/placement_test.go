package etcddir

import (
	"errors"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry"
)

// TestPlacement: three registries on one etcd, each with room for 2,
// forwarding over loopback HTTP. Seven persistent spawns through node a:
// two stay on a (local first), the next four go to b and c, two each,
// and the seventh is ErrNodeFull (WIT registry-full). list-processes
// through any node shows the caller's six with their nodes; another
// principal sees none. A slot freed on b takes the next spawn through a.
func TestPlacement(t *testing.T) {
	regs, marker := clusterWith(t, 3, false, clusterOpts{capacity: 2, placement: registry.PlaceLocalFirst, forward: true})
	a := regs[0]
	ctx := as("alice")
	var ids []string
	for range 6 {
		id, err := a.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{})
		if err != nil {
			t.Fatalf("spawn %d through a: %v", len(ids)+1, err)
		}
		ids = append(ids, id)
	}
	_, err := a.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{})
	if !errors.Is(err, registry.ErrNodeFull) || !errors.Is(err, registry.ErrRegistryFull) {
		t.Fatalf("7th spawn with every node full: %v, want ErrNodeFull", err)
	}
	t.Logf("refusal: %v", err)
	if n := settleMarked(marker, 6); n != 6 {
		t.Fatalf("%d processes running, want 6 (no stray from the refusal)", n)
	}
	onB := ""
	for _, r := range regs {
		l, err := r.List(ctx, nil)
		if err != nil {
			t.Fatalf("list through %s: %v", r.Directory().Node(), err)
		}
		per := map[string]int{}
		for _, in := range l {
			per[in.Node]++
			if in.Node == "b" {
				onB = in.ID
			}
		}
		if len(l) != 6 || per["a"] != 2 || per["b"] != 2 || per["c"] != 2 {
			t.Fatalf("list through %s: %d processes, per node %v; want 2 on each", r.Directory().Node(), len(l), per)
		}
		if l, err := r.List(as("mallory"), nil); err != nil || len(l) != 0 {
			t.Fatalf("another principal's list through %s: %d, %v", r.Directory().Node(), len(l), err)
		}
	}
	st, err := regs[2].StatusMany(ctx, ids)
	if err != nil || len(st) != 6 {
		t.Fatalf("status-many through c: %d of 6, %v", len(st), err)
	}
	if _, err := a.Stop(ctx, onB, nil); err != nil { // forwarded to b
		t.Fatalf("stop b's process through a: %v", err)
	}
	// The exit happened on b; poll-events through c relays it.
	var seen bool
	var cur uint64
	for deadline := time.Now().Add(30 * time.Second); !seen; {
		bt, err := regs[2].PollEvents(ctx, cur, 64, 2*time.Second)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("poll-events through c: %+v %v (exit of b's process not seen)", bt, err)
		}
		for _, e := range bt.Events {
			seen = seen || (e.ID == onB && e.Kind == registry.EventExited)
		}
		cur = bt.Next
	}
	if bt, err := regs[2].PollEvents(as("mallory"), 0, 64, 300*time.Millisecond); err != nil || len(bt.Events) != 0 {
		t.Fatalf("another principal's events through c: %+v %v", bt, err)
	}
	// b's freed slot is published a write late: poll, bounded.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		id, err := a.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{})
		if err == nil {
			if in, err := a.Status(ctx, id); err != nil || in.Node != "b" {
				t.Fatalf("the spawn after b freed a slot: %+v %v, want on b", in, err)
			}
			break
		}
		if !errors.Is(err, registry.ErrNodeFull) || time.Now().After(deadline) {
			t.Fatalf("spawn after b freed a slot: %v", err)
		}
	}
}

package etcddir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/etcddir/etcdtest"
	"github.com/capsule-host/capsule-host/registry/journal"
)

// capScope is the scope of as("alice") in the test capsule "cap".
var capScope = registry.DirScope{Capsule: "cap", Principal: "alice"}

// scopeTotal reads s's cluster-wide counts from etcd (not a cache).
func scopeTotal(t testing.TB, d *Dir, s registry.DirScope) registry.DirHolding {
	t.Helper()
	st, err := d.fetchScope(etcdtest.Context(t, 10*time.Second), scopeKey(s))
	if err != nil {
		t.Fatalf("read scope: %v", err)
	}
	return st.total()
}

// records counts the process records in etcd.
func records(t testing.TB, d *Dir) int64 {
	t.Helper()
	resp, err := d.cli.Get(etcdtest.Context(t, 10*time.Second), d.prefix+"procs/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count records: %v", err)
	}
	return resp.Count
}

// TestReservationsReleasedOnFailure: a spawn that fails after its etcd
// reservation gives back exactly what it took, on each failure path: the
// backend cannot start the command (a file that passes the exec check but
// is no program: execve's ENOEXEC), in each tier; and the journal cannot
// record a persistent spawn (the process is started, then killed). After
// each, the scope's counts in etcd and the process records are exactly
// those of the one process that runs, no stray process is left, and the
// cap still admits exactly its remaining slots.
func TestReservationsReleasedOnFailure(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(bad, []byte("\x00\x01\x02 no ELF, no #!"), 0o755); err != nil {
		t.Fatal(err)
	}
	var jr *journal.Journal
	regs, marker := clusterWith(t, 1, false, clusterOpts{exec: []string{bad}, mutate: func(c *registry.Config) {
		var err error
		if jr, _, err = journal.Open(filepath.Join(c.StateDir, "journal.db"), journal.Options{}); err != nil {
			t.Fatal(err)
		}
		c.Journal = jr
	}})
	t.Cleanup(func() { jr.Close() })
	r := regs[0]
	d := r.Directory().(*Dir)
	ctx := as("alice")
	exact := func(step string, running, retained int, recs int64) {
		t.Helper()
		if got := scopeTotal(t, d, capScope); got != (registry.DirHolding{Running: running, Retained: retained}) {
			t.Fatalf("%s: etcd counts %+v, want %d running, %d retained", step, got, running, retained)
		}
		if n := records(t, d); n != recs {
			t.Fatalf("%s: %d process records in etcd, want %d", step, n, recs)
		}
	}
	if _, err := r.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{}); err != nil {
		t.Fatal(err)
	}
	exact("one process", 1, 1, 1)

	badReq := registry.SpawnRequest{Cmd: bad, Env: []registry.EnvVar{{Key: markerKey, Value: marker}}}
	_, err := r.SpawnPersistent(ctx, badReq, registry.PersistOptions{})
	t.Logf("persistent start failure: %v", err)
	if err == nil || errors.Is(err, registry.ErrQuota) {
		t.Fatalf("spawn-persistent of a non-program: %v, want the backend's start failure", err)
	}
	exact("after a persistent start failure", 1, 1, 1)
	if _, err := r.Spawn(ctx, badReq); err == nil {
		t.Fatal("spawn of a non-program succeeded")
	}
	exact("after a run-to-completion start failure", 1, 1, 1)
	if h, err := r.SpawnBackground(ctx, badReq); err == nil {
		h.Drop(ctx)
		t.Fatal("spawn-background of a non-program succeeded")
	}
	exact("after a background start failure", 1, 1, 1)

	if err := jr.Close(); err != nil { // every write to it fails from now on
		t.Fatal(err)
	}
	_, err = r.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{})
	t.Logf("journal failure: %v", err)
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("spawn-persistent with the journal failing: %v, want unavailable", err)
	}
	exact("after a journal failure", 1, 1, 1)
	if n := settleMarked(marker, 1); n != 1 {
		t.Fatalf("%d processes running, want 1 (the unjournaled one killed)", n)
	}

	// The cap (8) admits exactly 7 more, here and in etcd alike.
	var hs []*registry.Handle
	for i := range 7 {
		h, err := r.SpawnBackground(ctx, sleeper(marker))
		if err != nil {
			t.Fatalf("background spawn %d of the 7 left: %v", i+1, err)
		}
		hs = append(hs, h)
	}
	if h, err := r.SpawnBackground(ctx, sleeper(marker)); !errors.Is(err, registry.ErrQuota) {
		if err == nil {
			h.Drop(ctx)
		}
		t.Fatalf("a 9th process: %v, want quota", err)
	}
	exact("at the cap", 8, 1, 1)
	for _, h := range hs {
		if err := h.Drop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	exact("after the background ones ended", 1, 1, 1)
}

// TestLeaseRevoked is split brain with etcd up: node b's lease is revoked
// behind its back (as when it was cut off from etcd for longer than the
// TTL). From then on b refuses every spawn with ErrUnavailable until it
// holds a lease again, while it keeps serving the process it holds; a
// spawn that succeeds only ever does so under a new lease. While
// another holder claims the name "b" (b cannot re-register), b keeps
// refusing and its health says why. When the name is free, b registers
// under a new lease, rewrites its counts and records, and serves spawns
// again; a finds b's process through the directory as before.
func TestLeaseRevoked(t *testing.T) {
	regs, marker := clusterWith(t, 2, false, clusterOpts{forward: true, ttl: 3 * time.Second})
	a, b := regs[0], regs[1]
	db := b.Directory().(*Dir)
	ctx := as("alice")
	idB, err := b.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: db.cfg.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ectx := etcdtest.Context(t, 2*time.Minute)
	// The claimant: another holder of the name b, so that b cannot
	// re-register while the test looks.
	claim, err := cli.Grant(ectx, 60)
	if err != nil {
		t.Fatal(err)
	}
	old := db.LeaseID()
	if _, err := cli.Revoke(ectx, clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ectx, db.nodeKey("b"), `{"name":"b","address":"127.0.0.1:1","capacity":0,"version":"claimant","started":"2026-01-01T00:00:00Z"}`, clientv3.WithLease(claim.ID)); err != nil {
		t.Fatal(err)
	}
	// Health says so at once, whether or not b's keep-alive noticed yet.
	if err := db.Health(ctx); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("b's health right after its lease was revoked: %v, want unavailable", err)
	}
	spawnB := func(step string) bool {
		t.Helper()
		id, err := b.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{})
		if err == nil {
			if db.LeaseID() == old || !db.live.Load() {
				t.Fatalf("%s: b spawned %s under its revoked lease", step, id)
			}
			return true
		}
		if !errors.Is(err, registry.ErrUnavailable) {
			t.Fatalf("%s: spawn through b: %v, want unavailable", step, err)
		}
		return false
	}
	// Refused before b notices (the count's write names a lease etcd no
	// longer has) and after (no lease), for as long as the name is taken.
	for end := time.Now().Add(2 * db.cfg.TTL); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if spawnB("name claimed") {
			t.Fatal("b spawned while another holder has its name")
		}
	}
	if db.live.Load() {
		t.Fatal("b did not notice its lease was revoked within two TTLs")
	}
	if err := db.Health(ctx); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("b's health without a lease: %v, want unavailable", err)
	}
	if c, err := b.ReadSince(ctx, idB, registry.Stdout, nil, 16); err != nil {
		t.Fatalf("b's own process without a lease: %+v %v", c, err)
	}
	if _, err := cli.Revoke(ectx, claim.ID); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(time.Minute); !spawnB("name free"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("b did not serve spawns within a minute of its name being free")
		}
	}
	if err := db.Health(ctx); err != nil {
		t.Fatalf("b's health after re-registering: %v", err)
	}
	if got := scopeTotal(t, db, capScope); got != (registry.DirHolding{Running: 2, Retained: 2}) {
		t.Fatalf("etcd counts after b re-registered: %+v, want b's 2 rewritten", got)
	}
	if in, err := a.Status(ctx, idB); err != nil || in.Node != "b" || in.Exit != nil {
		t.Fatalf("b's first process through a after b re-registered: %+v %v", in, err)
	}
}

package etcddir

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/etcddir/etcdtest"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// TestMain lets the local backend re-execute this binary as its helper.
func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }

const markerKey = "CAPSULE_ETCDDIR_TEST"

// cluster is n registries of one capsule sharing one etcd and one
// directory key (an ID names the same record on every node).
func cluster(t testing.TB, n int, single bool) ([]*registry.Registry, string) {
	t.Helper()
	return clusterWith(t, n, single, clusterOpts{})
}

// clusterOpts: a node capacity, a placement, and forwarding between the
// nodes over loopback HTTP (forward.go's loopForwarder); a lease TTL
// (whole seconds; 0: the default), more commands the capsule may exec,
// and a last change to each registry's config.
type clusterOpts struct {
	capacity  int
	placement registry.Placement
	forward   bool
	fw        **loopForwarder // set to the forwarder when forward
	ttl       time.Duration
	exec      []string
	mutate    func(*registry.Config)
}

func clusterWith(t testing.TB, n int, single bool, o clusterOpts) ([]*registry.Registry, string) {
	t.Helper()
	c := etcdtest.Start(t, 1)
	be, err := local.New(local.Options{NoCgroups: true})
	if err != nil {
		t.Fatal(err)
	}
	var dirKey [32]byte
	rand.Read(dirKey[:])
	var mb [6]byte
	rand.Read(mb[:])
	marker := hex.EncodeToString(mb[:])
	ws := t.TempDir()
	t.Cleanup(func() {
		if n := settleMarked(marker, 0); n != 0 {
			t.Errorf("%d stray processes after shutdown", n)
		}
	})
	var regs []*registry.Registry
	var fw *loopForwarder
	if o.forward {
		fw = newLoopForwarder(t)
		if o.fw != nil {
			*o.fw = fw
		}
	}
	for i := range n {
		var d registry.Directory = registry.NewLocalDirectory()
		if !single {
			d = open(t, c, string(rune('a'+i)), o.ttl, 0)
		}
		cfg := registry.Config{
			Backends: map[string]sandbox.Backend{"local": be}, StateDir: t.TempDir(),
			Directory: d, DirectoryKey: &dirKey, // each node its own keys, one directory key
			Quotas:       registry.Quotas{MaxConcurrent: 8, MaxRetained: 32, MaxEntries: 256},
			NodeCapacity: o.capacity, Placement: o.placement,
		}
		if fw != nil {
			cfg.Forwarder = fw
		}
		if o.mutate != nil {
			o.mutate(&cfg)
		}
		r, err := registry.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = r.RegisterCapsule("cap", registry.CapsulePolicy{Exec: append([]string{"/bin/sh", "/bin/sleep"}, o.exec...), AllowPersistent: true, Workspace: filepath.Join(ws, "cap")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
		regs = append(regs, r)
		if fw != nil {
			fw.serve(t, d.Node(), r)
		}
	}
	return regs, marker
}

func as(p string) context.Context {
	return registry.WithCaller(context.Background(), registry.Caller{Capsule: "cap", Principal: p})
}

func sleeper(marker string) registry.SpawnRequest {
	return registry.SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "exec sleep 60"}, Env: []registry.EnvVar{{Key: markerKey, Value: marker}}}
}

// TestClusterQuota: 100 concurrent spawn-persistent spread across three
// registries on one etcd against a cap of 8: exactly 8 start, 92 get
// ErrQuota, and exactly 8 processes exist. A process is found through the
// other nodes as held by its node; another principal gets no-such-process.
func TestClusterQuota(t *testing.T) {
	regs, marker := cluster(t, 3, false)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	var home []int
	quota := 0
	for i := range 100 {
		wg.Go(func() {
			id, err := regs[i%3].SpawnPersistent(as("alice"), sleeper(marker), registry.PersistOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ids, home = append(ids, id), append(home, i%3)
			case errors.Is(err, registry.ErrQuota):
				quota++
			default:
				t.Errorf("spawn: %v", err)
			}
		})
	}
	wg.Wait()
	if len(ids) != 8 || quota != 92 {
		t.Fatalf("%d spawned, %d quota; want 8 and 92", len(ids), quota)
	}
	if n := settleMarked(marker, 8); n != 8 {
		t.Fatalf("%d processes running, want 8", n)
	}
	id, h := ids[0], home[0]
	other := regs[(h+1)%3]
	var he *registry.HeldElsewhereError
	if _, err := other.Status(as("alice"), id); !errors.As(err, &he) || he.Node != string(rune('a'+h)) || !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("status through another node: %v, want held by %c", err, 'a'+h)
	}
	for _, r := range regs {
		if _, err := r.Status(as("mallory"), id); !errors.Is(err, registry.ErrNoSuchProcess) || errors.As(err, &he) {
			t.Fatalf("another principal: %v, want no-such-process", err)
		}
	}
	// Stop and release one: its slot is free cluster-wide.
	ctx := as("alice")
	if _, err := regs[h].Stop(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	if err := regs[h].Release(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Status(ctx, id); !errors.Is(err, registry.ErrNoSuchProcess) {
		t.Fatalf("status of a released process through another node: %v", err)
	}
	if _, err := other.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{}); err != nil {
		t.Fatalf("spawn after a release elsewhere: %v", err)
	}
}

// BenchmarkSpawnEtcdVsLocal is a persistent spawn, wait and release with
// the etcd directory (reservation, publication, releases) and with the
// single-node one, interleaved in one run: the etcd/local ratio is
// cluster mode's spawn overhead (goal ≤ 1.5).
func BenchmarkSpawnEtcdVsLocal(b *testing.B) {
	etcd, marker := cluster(b, 1, false)
	local, _ := cluster(b, 1, true)
	ctx := as("alice")
	req := registry.SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "exit 0"}, Env: []registry.EnvVar{{Key: markerKey, Value: marker}}}
	once := func(r *registry.Registry) time.Duration {
		t0 := time.Now()
		id, err := r.SpawnPersistent(ctx, req, registry.PersistOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Wait(ctx, id, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		if err := r.Release(ctx, id); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var de, dl time.Duration
	for b.Loop() {
		de += once(etcd[0])
		dl += once(local[0])
	}
	n := float64(b.N)
	b.ReportMetric(float64(de.Microseconds())/n, "etcd-µs")
	b.ReportMetric(float64(dl.Microseconds())/n, "local-µs")
	b.ReportMetric(float64(de)/float64(dl), "etcd/local")
}

// settleMarked polls countMarked until it reads want, for at most 10 s,
// and returns the last count. One read is not enough: a process between
// fork and exec, or in the middle of exec, has no readable environ yet
// (a fresh-clone CI run counted 5 of 6 that way), and a stopped one
// lingers until it is reaped. A stray stays, so a count that never
// settles at want is still caught.
func settleMarked(marker string, want int) int {
	n := countMarked(marker)
	for deadline := time.Now().Add(10 * time.Second); n != want && time.Now().Before(deadline); n = countMarked(marker) {
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// countMarked counts live processes carrying marker in their environment.
func countMarked(marker string) int {
	ents, _ := os.ReadDir("/proc")
	want := []byte(markerKey + "=" + marker + "\x00")
	n := 0
	for _, d := range ents {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err == nil && bytes.Contains(append(b, 0), want) {
			n++
		}
	}
	return n
}

package registry

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// fakeClock drives the reap ladder deterministically: the reaper's own
// ticker still runs, but every deadline is measured on this clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	t      testing.TB
	r      *Registry
	clock  *fakeClock
	ws     string
	marker string // appears in the argv of every test process: stray detection
}

var (
	backendOnce sync.Once
	backendVal  *local.Backend
	nocgVal     *local.Backend
	backendErr  error
)

func backends(t testing.TB) (*local.Backend, *local.Backend) {
	backendOnce.Do(func() {
		// REGISTRY_TEST_NOCGROUPS=1 runs the suite on the backend's
		// no-cgroup path (process groups and sessions only).
		backendVal, backendErr = local.New(local.Options{NoCgroups: os.Getenv("REGISTRY_TEST_NOCGROUPS") != ""})
		if backendErr == nil {
			nocgVal, backendErr = local.New(local.Options{Name: "nocg", NoCgroups: true})
		}
	})
	if backendErr != nil {
		t.Fatalf("local backend: %v", backendErr)
	}
	return backendVal, nocgVal
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("REGISTRY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

var testExec = []string{"/bin/sh", "/bin/cat", "/bin/sleep", "/bin/true", "/usr/bin/head", "/bin/printf"}

func newEnv(t testing.TB, mut func(*Config)) *env {
	t.Helper()
	be, nocg := backends(t)
	var mb [6]byte
	rand.Read(mb[:])
	cfg := Config{
		Backends: map[string]sandbox.Backend{"local": be, "nocg": nocg},
		StateDir: t.TempDir(),
		Logger:   testLogger(t),
	}
	cfg.Defaults.Drain = 200 * time.Millisecond
	cfg.Defaults.StopGrace = 2 * time.Second
	cfg.Defaults.ReapInterval = time.Hour // tests call sweep() themselves, on the fake clock
	if mut != nil {
		mut(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, r: r, clock: &fakeClock{t: time.Unix(1_700_000_000, 0)}, ws: t.TempDir(), marker: "regtest-" + hex.EncodeToString(mb[:])}
	r.now = e.clock.Now
	e.register("cap", nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if n := e.strays(); n > 0 {
			t.Errorf("%d stray processes after shutdown", n)
		}
	})
	return e
}

func (e *env) register(name string, mut func(*CapsulePolicy)) {
	e.t.Helper()
	p := CapsulePolicy{Exec: testExec, AllowPersistent: true, Workspace: filepath.Join(e.ws, name)}
	if mut != nil {
		mut(&p)
	}
	if err := e.r.RegisterCapsule(name, p); err != nil {
		e.t.Fatal(err)
	}
}

func as(capsule, principal string) context.Context {
	return WithCaller(context.Background(), Caller{Capsule: capsule, Principal: principal})
}

// sh builds a request running script under /bin/sh; the marker rides in
// the environment so stray processes are findable in /proc.
func (e *env) sh(script string) SpawnRequest {
	return SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", script}, Env: []EnvVar{{markerKey, e.marker}}}
}

func (e *env) spawn(ctx context.Context, script string, o PersistOptions) string {
	e.t.Helper()
	id, err := e.r.SpawnPersistent(ctx, e.sh(script), o)
	if err != nil {
		e.t.Fatalf("spawn %q: %v", script, err)
	}
	return id
}

func (e *env) wait(ctx context.Context, id string) Exit {
	e.t.Helper()
	ex, err := e.r.Wait(ctx, id, 20*time.Second)
	if err != nil {
		e.t.Fatalf("wait: %v", err)
	}
	return ex
}

// strays counts live process trees carrying this env's marker (in their
// environment, inherited by every descendant). A tree is counted once, at
// its root (the marked process whose parent is unmarked), so a fork in
// flight is not mistaken for a second process; an escaped descendant
// re-parented elsewhere is a root of its own, and so counted.
func (e *env) strays() int {
	return countProcs(e.marker)
}

func countProcs(marker string) int {
	ents, _ := os.ReadDir("/proc")
	marked := map[string]string{} // pid → ppid
	want := []byte(markerKey + "=" + marker + "\x00")
	for _, d := range ents {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err != nil || !bytes.Contains(append(b, 0), want) {
			continue
		}
		st, _ := os.ReadFile("/proc/" + d.Name() + "/stat")
		i := bytes.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 2 {
			continue
		}
		marked[d.Name()] = f[1] // a zombie is still counted: it is a leak too
	}
	n := 0
	for _, ppid := range marked {
		if _, parentMarked := marked[ppid]; !parentMarked {
			n++
		}
	}
	return n
}

const markerKey = "REGISTRY_TEST_MARKER"

// readUntil reads a stream from the start until it contains want.
func (e *env) readUntil(ctx context.Context, id string, s Stream, want string) []byte {
	e.t.Helper()
	var got []byte
	var cur *string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c, err := e.r.ReadSince(ctx, id, s, cur, 1<<20)
		if err != nil {
			e.t.Fatalf("read-since: %v", err)
		}
		got = append(got, c.Data...)
		cur = &c.Next
		if strings.Contains(string(got), want) {
			return got
		}
		if c.EOF {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("never saw %q; got %q", want, got)
	return nil
}

func isErr(err, class error) bool { return err != nil && errors.Is(err, class) }

func ptr[T any](v T) *T { return &v }

// durableDir is a 0700 directory for a test's journal and keepers,
// outside t.TempDir (a keeper's socket path must stay short), removed at
// the end, and the registry keys its daemons share.
func durableDir(t testing.TB, prefix string) (string, *Keys) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o700)
	return dir, &Keys{Hash: [32]byte{1}, MAC: [32]byte{2}, Seal: [32]byte{3}}
}

// keeperDaemons is what a test's successive daemons share: a journal file
// and one local keeper, closed (stopping what it holds) after every
// daemon's own cleanup. daemon() makes the next daemon on them; ctx
// bounds the test's daemon-side calls.
func keeperDaemons(t *testing.T, prefix string) (daemon func() (*env, *journal.Journal), ctx context.Context) {
	t.Helper()
	dir, keys := durableDir(t, prefix)
	jpath := filepath.Join(dir, "journal.db")
	kd := filepath.Join(dir, "k")
	os.Mkdir(kd, 0o700)
	kb, err := keeper.NewBackend(keeper.Config{Dir: kd, Name: "local"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(func() { kb.Close(ctx, true); cancel() })
	return func() (*env, *journal.Journal) {
		jr, _, err := journal.Open(jpath, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return newEnv(t, func(c *Config) {
			c.Journal, c.Keys = jr, keys
			c.Backends["local"] = kb
		}), jr
	}, ctx
}

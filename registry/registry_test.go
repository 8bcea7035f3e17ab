package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

// Every ID-keyed call on an ID the caller does not own, or that does not
// exist (any more, or at all), returns the very same error value.
func TestOwnershipIndistinguishable(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults.ExitRetention = time.Minute })
	e.register("other", nil)
	alice, bob, aliceOther := as("cap", "alice"), as("cap", "bob"), as("other", "alice")
	fallback := WithCaller(context.Background(), Caller{Capsule: "cap", Principal: "alice", Fallback: true})

	live := e.spawn(alice, "sleep 100", PersistOptions{KeepStdinOpen: true})
	released := e.spawn(alice, "true", PersistOptions{})
	e.wait(alice, released)
	if err := e.r.Release(alice, released); err != nil {
		t.Fatal(err)
	}
	reaped := e.spawn(alice, "true", PersistOptions{ExitRetention: ptr(time.Second)})
	e.wait(alice, reaped)
	e.clock.Advance(2 * time.Second)
	e.r.sweep()
	unknown, _ := newRawID()

	cases := []struct {
		name string
		ctx  context.Context
		id   string
	}{
		{"unknown", alice, unknown},
		{"malformed short", alice, "abc"},
		{"malformed empty", alice, ""},
		{"malformed uppercase", alice, strings.ToUpper(live)},
		{"malformed alphabet", alice, strings.Repeat("1", 52)},
		{"malformed long", alice, live + live},
		{"released", bob, released}, // the owner's idempotent release is the one documented exception
		{"reaped", bob, reaped},
		{"released (owner, not release)", alice, released},
		{"reaped (owner, not release)", alice, reaped},
		{"wrong principal", bob, live},
		{"wrong capsule", aliceOther, live},
		{"owner-fallback of the same name", fallback, live},
	}
	calls := []struct {
		name  string
		owner bool // the owner's call is exempt for released/reaped IDs (idempotent release)
		call  func(ctx context.Context, id string) error
	}{
		{"attach", false, func(ctx context.Context, id string) error { _, err := e.r.Attach(ctx, id); return err }},
		{"status", false, func(ctx context.Context, id string) error { _, err := e.r.Status(ctx, id); return err }},
		{"read-since", false, func(ctx context.Context, id string) error {
			_, err := e.r.ReadSince(ctx, id, Stdout, nil, 10)
			return err
		}},
		{"read-logs", false, func(ctx context.Context, id string) error { _, err := e.r.ReadLogs(ctx, id); return err }},
		{"write-stdin", false, func(ctx context.Context, id string) error { _, err := e.r.WriteStdin(ctx, id, []byte("x")); return err }},
		{"close-stdin", false, func(ctx context.Context, id string) error { return e.r.CloseStdin(ctx, id) }},
		{"signal", false, func(ctx context.Context, id string) error { return e.r.Signal(ctx, id, SigTerm) }},
		{"wait", false, func(ctx context.Context, id string) error { _, err := e.r.Wait(ctx, id, time.Millisecond); return err }},
		{"stop", false, func(ctx context.Context, id string) error {
			_, err := e.r.Stop(ctx, id, ptr(time.Duration(0)))
			return err
		}},
		{"release", true, func(ctx context.Context, id string) error { return e.r.Release(ctx, id) }},
	}
	for _, c := range cases {
		for _, f := range calls {
			if f.owner && c.ctx == alice && (c.id == released || c.id == reaped) {
				if err := f.call(c.ctx, c.id); err != nil {
					t.Errorf("%s/%s: owner's repeated release should succeed, got %v", c.name, f.name, err)
				}
				continue
			}
			err := f.call(c.ctx, c.id)
			if err != ErrNoSuchProcess { // identity: the same value, not merely the same class
				t.Errorf("%s/%s: got %v, want the ErrNoSuchProcess value", c.name, f.name, err)
			} else if err.Error() != ErrNoSuchProcess.Error() {
				t.Errorf("%s/%s: text %q", c.name, f.name, err)
			}
		}
		if got, err := e.r.StatusMany(c.ctx, []string{c.id}); err != nil || len(got) != 0 {
			t.Errorf("%s/status-many: %v %v", c.name, got, err)
		}
	}
	// A malformed cursor on the owner's own live ID is the same error too.
	if _, err := e.r.ReadSince(alice, live, Stdout, ptr("garbage"), 10); err != ErrNoSuchProcess {
		t.Errorf("malformed cursor: %v", err)
	}
	// Lists are scoped.
	for _, ctx := range []context.Context{bob, aliceOther, fallback} {
		if l, _ := e.r.List(ctx, nil); len(l) != 0 {
			t.Errorf("foreign list sees %d", len(l))
		}
	}
	// The victim process is untouched by all of the above.
	if in, err := e.r.Status(alice, live); err != nil || in.Phase != PhaseRunning || !in.StdinOpen {
		t.Fatalf("owner's process disturbed: %+v %v", in, err)
	}
	if l, _ := e.r.List(alice, nil); len(l) != 1 || l[0].ID != live {
		t.Fatalf("owner list: %+v", l)
	}
}

// 100 concurrent spawn-persistent against a cap of 8: exactly 8 succeed,
// 92 get ErrQuota, nothing else starts, nothing is left behind.
func TestQuotaReservedBeforeSpawn(t *testing.T) {
	e := newEnv(t, nil)
	e.register("cap", func(p *CapsulePolicy) { p.Quotas.MaxConcurrent = 8 })
	ctx := as("cap", "alice")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ok       []string
		quota    int
		other    []error
		start    = make(chan struct{})
		maxAlive int
	)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id, err := e.r.SpawnPersistent(ctx, e.sh("sleep 100"), PersistOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok = append(ok, id)
			case errors.Is(err, ErrQuota):
				quota++
			default:
				other = append(other, err)
			}
			maxAlive = max(maxAlive, e.strays())
		}()
	}
	close(start)
	wg.Wait()
	if len(ok) != 8 || quota != 92 || len(other) != 0 {
		t.Fatalf("ok=%d quota=%d other=%v", len(ok), quota, other)
	}
	if maxAlive > 8 {
		t.Fatalf("%d processes were alive at once: quota not reserved before spawn", maxAlive)
	}
	if n := e.strays(); n != 8 {
		t.Fatalf("%d processes alive, want 8", n)
	}
	// Failure paths release the reservation: a refused exec, a bad cwd and
	// a missing command do not leak slots.
	for _, req := range []SpawnRequest{{Cmd: "/bin/ls"}, {Cmd: "/bin/sh", Cwd: "../x"}} {
		if _, err := e.r.SpawnPersistent(ctx, req, PersistOptions{}); err == nil {
			t.Fatal("bad request accepted")
		}
	}
	for _, id := range ok {
		if _, err := e.r.Stop(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.strays(); n != 0 {
		t.Fatalf("%d stray", n)
	}
	// The slots are free again (retained IDs still count until released).
	id := e.spawn(ctx, "true", PersistOptions{})
	e.wait(ctx, id)
}

func TestRetainedAndEntryCaps(t *testing.T) {
	e := newEnv(t, nil)
	e.register("cap", func(p *CapsulePolicy) { p.Quotas = Quotas{MaxRetained: 2, MaxEntries: 3} })
	a, b := as("cap", "alice"), as("cap", "bob")
	ids := []string{e.spawn(a, "true", PersistOptions{}), e.spawn(a, "true", PersistOptions{})}
	for _, id := range ids {
		e.wait(a, id)
	}
	if _, err := e.r.SpawnPersistent(a, e.sh("true"), PersistOptions{}); !errors.Is(err, ErrRegistryFull) {
		t.Fatalf("retained cap: %v", err)
	}
	e.spawn(b, "true", PersistOptions{})
	if _, err := e.r.SpawnPersistent(b, e.sh("true"), PersistOptions{}); !errors.Is(err, ErrRegistryFull) {
		t.Fatalf("entries cap: %v", err)
	}
	// The ephemeral tier does not use retained IDs.
	if _, err := e.r.Spawn(a, e.sh("true")); err != nil {
		t.Fatalf("ephemeral under a full registry: %v", err)
	}
	if err := e.r.Release(a, ids[0]); err != nil {
		t.Fatal(err)
	}
	e.spawn(a, "true", PersistOptions{})
}

func TestConcurrentQuotaSharedByTiers(t *testing.T) {
	e := newEnv(t, nil)
	e.register("cap", func(p *CapsulePolicy) { p.Quotas.MaxConcurrent = 2 })
	ctx := as("cap", "alice")
	h, err := e.r.SpawnBackground(ctx, e.sh("sleep 100"))
	if err != nil {
		t.Fatal(err)
	}
	e.spawn(ctx, "sleep 100", PersistOptions{})
	if _, err := e.r.SpawnPersistent(ctx, e.sh("true"), PersistOptions{}); !errors.Is(err, ErrQuota) {
		t.Fatalf("persistent: %v", err)
	}
	if _, err := e.r.Spawn(ctx, e.sh("true")); !errors.Is(err, ErrQuota) {
		t.Fatalf("spawn: %v", err)
	}
	// Another principal has its own budget.
	if _, err := e.r.Spawn(as("cap", "bob"), e.sh("true")); err != nil {
		t.Fatal(err)
	}
	if err := h.Drop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Spawn(ctx, e.sh("true")); err != nil {
		t.Fatalf("slot not freed by drop: %v", err)
	}
}

func TestSpawnPolicyChecks(t *testing.T) {
	e := newEnv(t, nil)
	e.register("nopersist", func(p *CapsulePolicy) { p.AllowPersistent = false })
	alice := as("cap", "alice")
	fb := WithCaller(context.Background(), Caller{Capsule: "cap", Principal: "owner", Fallback: true})
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		req     SpawnRequest
		persist bool
		want    error
		text    string
	}{
		{"exec denied", alice, SpawnRequest{Cmd: "/bin/ls"}, true, ErrCapabilityDenied, "/bin/ls"},
		{"exec denied by name", alice, SpawnRequest{Cmd: "ls"}, false, ErrCapabilityDenied, "ls"},
		{"exec via PATH", alice, SpawnRequest{Cmd: "true"}, false, nil, ""},
		{"fallback persist", fb, SpawnRequest{Cmd: "/bin/true"}, true, ErrPersistUnsupported, ""},
		{"fallback ephemeral", fb, SpawnRequest{Cmd: "/bin/true"}, false, nil, ""},
		{"no allow_persistent", as("nopersist", "alice"), SpawnRequest{Cmd: "/bin/true"}, true, ErrPersistUnsupported, "allow_persistent"},
		{"unregistered capsule", as("ghost", "alice"), SpawnRequest{Cmd: "/bin/true"}, false, ErrCapabilityDenied, "ghost"},
		{"cwd escape", alice, SpawnRequest{Cmd: "/bin/true", Cwd: "../bob"}, false, ErrBoundaryEscape, ""},
		{"cwd absolute", alice, SpawnRequest{Cmd: "/bin/true", Cwd: "/etc"}, false, ErrBoundaryEscape, ""},
		{"cwd missing", alice, SpawnRequest{Cmd: "/bin/true", Cwd: "nope"}, false, ErrInvalidInput, ""},
		{"env reserved", alice, SpawnRequest{Cmd: "/bin/true", Env: []EnvVar{{"LD_PRELOAD", "x"}}}, false, ErrInvalidInput, "LD_PRELOAD"},
		{"env bad key", alice, SpawnRequest{Cmd: "/bin/true", Env: []EnvVar{{"A-B", "x"}}}, false, ErrInvalidInput, "A-B"},
		{"arg NUL", alice, SpawnRequest{Cmd: "/bin/true", Args: []string{"a\x00"}}, false, ErrInvalidInput, ""},
		{"prelude too large", alice, SpawnRequest{Cmd: "/bin/cat", Stdin: make([]byte, 4<<20+1), HasStdin: true}, false, ErrTooLarge, ""},
	} {
		var err error
		if tc.persist {
			_, err = e.r.SpawnPersistent(tc.ctx, tc.req, PersistOptions{})
		} else {
			_, err = e.r.Spawn(tc.ctx, tc.req)
		}
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.text) {
			t.Errorf("%s: got %v, want %v naming %q", tc.name, err, tc.want, tc.text)
		}
	}
	for name, o := range map[string]PersistOptions{
		"idle 0":       {IdleTimeout: ptr(time.Duration(0))},
		"lifetime 0":   {MaxLifetime: ptr(time.Duration(0))},
		"label ctl":    {Label: ptr("a\nb")},
		"pids 0":       {Limits: Limits{MaxPids: ptr(uint32(0))}},
		"bad overflow": {Overflow: 99},
	} {
		if _, err := e.r.SpawnPersistent(alice, e.sh("true"), o); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Principals get separate 0700 workspaces; the process runs in its own.
	res, err := e.r.Spawn(alice, SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "pwd"}})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(e.ws, "cap", "alice")
	if got := strings.TrimSpace(string(res.Stdout)); got != want {
		t.Fatalf("cwd %q, want %q", got, want)
	}
	if fi, _ := os.Stat(want); fi.Mode().Perm() != 0o700 {
		t.Fatalf("workspace mode %v", fi.Mode())
	}
	// The host environment does not leak.
	os.Setenv("REGISTRY_TEST_SECRET", "hunter2")
	defer os.Unsetenv("REGISTRY_TEST_SECRET")
	res, err = e.r.Spawn(alice, SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "env"}, Env: []EnvVar{{"MINE", "1"}}})
	if err != nil || bytes.Contains(res.Stdout, []byte("hunter2")) || !bytes.Contains(res.Stdout, []byte("MINE=1")) {
		t.Fatalf("env: %q %v", res.Stdout, err)
	}
}

func TestLimits(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	id := e.spawn(ctx, "ulimit -n", PersistOptions{Limits: Limits{MaxOpenFiles: ptr(uint32(17))}})
	e.wait(ctx, id)
	if got := e.readUntil(ctx, id, Stdout, "\n"); strings.TrimSpace(string(got)) != "17" {
		t.Fatalf("ulimit -n = %q", got)
	}
	// A limit the backend cannot enforce fails the spawn, naming it.
	e.register("nocg", func(p *CapsulePolicy) { p.Backend = "nocg" })
	_, err := e.r.SpawnPersistent(as("nocg", "alice"), e.sh("true"), PersistOptions{Limits: Limits{MaxMemoryBytes: ptr(uint64(64 << 20))}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("unsupported limit: %v", err)
	}
	if n := e.strays(); n != 0 {
		t.Fatalf("%d stray", n)
	}
}

// Raw IDs never reach the log; every line about a process names its
// capsule, principal and short hash.
func TestLogsCarryOwnerNeverID(t *testing.T) {
	var buf testutil.SyncBuffer
	e := newEnv(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ctx := as("cap", "alice")
	var ids []string
	for range 3 {
		ids = append(ids, e.spawn(ctx, "cat", PersistOptions{KeepStdinOpen: true}))
	}
	e.r.WriteStdin(ctx, ids[0], []byte("x\n"))
	e.r.Stop(ctx, ids[0], nil)
	e.r.Release(ctx, ids[0])
	e.r.Signal(ctx, ids[1], SigKill)
	e.r.EvictPrincipal(context.Background(), "alice")
	e.r.Spawn(ctx, SpawnRequest{Cmd: "/bin/ls"})
	if _, err := e.r.Spawn(ctx, e.sh("true")); err != nil {
		t.Fatal(err)
	}
	e.r.Shutdown(context.Background())
	out := buf.String()
	for _, id := range ids {
		if strings.Contains(out, id) || strings.Contains(out, id[:16]) {
			t.Fatalf("raw ID in the log:\n%s", out)
		}
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(line, "proc=") {
			n++
			if !strings.Contains(line, "capsule=cap") || !strings.Contains(line, "principal=alice") {
				t.Errorf("process line without its owner: %s", line)
			}
		}
	}
	if n < 8 {
		t.Fatalf("only %d process log lines:\n%s", n, out)
	}
	if !strings.Contains(out, "registry shut down") {
		t.Fatal("shutdown not logged")
	}
}

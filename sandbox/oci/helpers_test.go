package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/backendtest"
	"github.com/capsule-host/capsule-host/sandbox/oci/rootfs"
)

// Container root maps to this unprivileged host uid range in the test
// profile, so container root is not host root.
const testHostUID = 100000

var (
	initOnce sync.Once
	initPath string
	initErr  error

	rootfsOnce sync.Once
	rootfsDir  string
	rootfsErr  error
)

// needRuntime skips (loudly) unless we are root with runc and a static
// busybox: CI runs as root with all three installed by `make test`.
func needRuntime(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP LOUDLY: the OCI backend tests need root (CI runs them as root)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("SKIP LOUDLY: runc not installed (apt-get install runc)")
	}
	rootfsOnce.Do(func() {
		rootfsDir, rootfsErr = rootfs.Cached(rootfs.DefaultBusybox, filepath.Join(os.TempDir(), "capsule-test-cache"))
	})
	if rootfsErr != nil {
		t.Skipf("SKIP LOUDLY: busybox rootfs: %v (apt-get install busybox-static)", rootfsErr)
	}
	return rootfsDir
}

// publicDir makes a directory every uid can traverse (the user-namespaced
// container root must reach its workspace and spill dirs).
func publicDir(t testing.TB) string {
	t.Helper()
	base := filepath.Join(os.TempDir(), "capsule-oci-test")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	d, err := os.MkdirTemp(base, "t-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// testInit builds capsule-oci-init statically with gcc (as `make` does
// for operators) into the shared test cache.
func testInit(t testing.TB) string {
	t.Helper()
	initOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), "capsule-test-cache")
		os.MkdirAll(dir, 0o755)
		initPath = filepath.Join(dir, "capsule-oci-init")
		if _, err := exec.LookPath("gcc"); err != nil {
			initErr = fmt.Errorf("gcc not found: the init is built with gcc -static (apt-get install gcc libc6-dev)")
			return
		}
		cmd := exec.Command("gcc", "-static", "-Os", "-Wall", "-o", initPath, "init/capsule-oci-init.c")
		if out, err := cmd.CombinedOutput(); err != nil {
			initErr = fmt.Errorf("build capsule-oci-init: %v: %s", err, out)
		}
	})
	if initErr != nil {
		t.Fatal(initErr)
	}
	return initPath
}

func testProfile(rootfsDir string) Profile {
	return Profile{
		Rootfs:  rootfsDir,
		UserNS:  &IDMap{HostUID: testHostUID, HostGID: testHostUID, Size: 65536},
		Limits:  sandbox.Limits{MemoryBytes: 256 << 20, Pids: 256},
		Network: NetworkNone,
	}
}

type env struct {
	b         *Backend
	opts      Options
	workspace string
	spill     string
}

func newEnv(t testing.TB, mut func(*Options)) *env {
	t.Helper()
	rfs := needRuntime(t)
	dir := publicDir(t)
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	spill := filepath.Join(dir, "spill")
	os.Mkdir(spill, 0o700)
	opts := Options{
		Init:     testInit(t),
		Root:     filepath.Join(dir, "state"),
		Profiles: map[string]Profile{"default": testProfile(rfs)},
	}
	if mut != nil {
		mut(&opts)
	}
	if p := opts.Profiles["default"]; p.Runtime != "runsc" && p.UserNS != nil {
		// Container root is host uid 100000: give it the workspace. (runsc
		// profiles run without a user namespace: root keeps it.)
		os.Chown(ws, int(p.UserNS.HostUID), int(p.UserNS.HostGID))
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &env{b: b, opts: opts, workspace: ws, spill: spill}
}

// cleanupAfter ends h and removes its container when the test is over,
// with a context of its own: the test's is cancelled by then (a deferred
// cancel runs before t.Cleanup), and a cancelled Cleanup left the
// container's cgroup behind.
func (e *env) cleanupAfter(t testing.TB, h sandbox.Handle) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h.Terminate(ctx, sandbox.Force)
		if err := e.b.Cleanup(ctx, h.Ref()); err != nil {
			t.Errorf("cleanup of %s: %v", h.Ref(), err)
		}
	})
}

func (e *env) spec(argv ...string) sandbox.ProcessSpec {
	return sandbox.ProcessSpec{
		Argv:      argv,
		Cwd:       e.workspace,
		Env:       []string{"PATH=/bin"},
		Stdin:     sandbox.StdinSpec{Mode: sandbox.StdinClosed},
		Output:    sandbox.OutputSpec{RingBytes: 1 << 20, SpillBytes: 4 << 20, Overflow: sandbox.DropOldest, SpillDir: e.spill},
		Grace:     2 * time.Second,
		Drain:     2 * time.Second,
		Isolation: sandbox.IsolationSpec{Workspace: e.workspace, Profile: "default"},
	}
}

func readAll(t testing.TB, l sandbox.Log) string {
	t.Helper()
	b, _ := backendtest.ReadAll(t, l)
	return string(b)
}

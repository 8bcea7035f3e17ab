package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/bwrap"
	"github.com/capsule-host/capsule-host/sandbox/local"
	"github.com/capsule-host/capsule-host/sandbox/oci"
	"github.com/capsule-host/capsule-host/sandbox/oci/rootfs"
)

// End to end through a capsule on the sandboxed backends: the committed
// testcap module under a manifest written here that selects bwrap or oci,
// a real Host, registry and backend (real bwrap, real runc with the
// busybox rootfs and capsule-oci-init), calls landing on pooled instances.

// sandboxHostUID is where the test profile maps container root, so that
// container root is not host root (as in sandbox/oci's tests).
const sandboxHostUID = 100000

// needRoot skips loudly: these run as root in CI (make test installs the
// tools).
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP LOUDLY: the sandboxed end-to-end tests need root (CI runs them as root)")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIP LOUDLY: %s not installed (make deps: apt-get install runc bubblewrap busybox-static gcc libc6-dev)", tool)
		}
	}
}

var (
	ociInitOnce sync.Once
	ociInitPath string
	ociInitErr  error
)

// ociInit builds capsule-oci-init as the Makefile does, once per test
// binary, into the binary's private cache directory.
func ociInit(t *testing.T) string {
	t.Helper()
	ociInitOnce.Do(func() {
		src := filepath.Join(capsulesDir(t), "..", "sandbox", "oci", "init", "capsule-oci-init.c")
		ociInitPath = filepath.Join(cacheDir, "capsule-oci-init")
		out, err := exec.Command("gcc", "-static", "-Os", "-Wall", "-o", ociInitPath, src).CombinedOutput()
		if err != nil {
			ociInitErr = fmt.Errorf("gcc -static capsule-oci-init.c: %v: %s", err, out)
		}
	})
	if ociInitErr != nil {
		t.Fatal(ociInitErr)
	}
	return ociInitPath
}

// testcapAs writes a capsule directory holding the committed testcap
// module (its sha256 computed here) under a manifest naming it name, with
// capabilities.
func testcapAs(t *testing.T, name, capabilities string) string {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join(capsulesDir(t), "testcap", "testcap.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "testcap.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	m := fmt.Sprintf(`[capsule]
name = %q
version = "1.0.0"
module = "testcap.wasm"
sha256 = %q

[imports]
"capsule:process" = "1.1"

[capabilities]
%s
[pool]
min_idle = 3
max = 8
`, name, hex.EncodeToString(sum[:]), capabilities)
	if err := os.WriteFile(filepath.Join(dir, "Capsule.toml"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sandboxEnv is a Host whose registry has the local backend plus the
// given sandboxed one, with the capsules in capsuleDirs loaded. The
// registry gets the backend's policy data as the daemon builds it (a
// backend that describes itself, the oci one, gives its own), and the
// host derives the launch profiles from the registry, as the daemon's
// does. mut (optional) adjusts the host config.
func sandboxEnv(t *testing.T, stateDir, name string, be sandbox.Backend, mut func(*host.Config), capsuleDirs ...string) *env {
	t.Helper()
	lb, err := local.New(local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var pol sandbox.BackendPolicy
	if d, ok := be.(interface{ Policy() sandbox.BackendPolicy }); ok {
		pol = d.Policy()
	}
	reg, err := registry.New(registry.Config{
		Backends: map[string]sandbox.Backend{"local": lb, name: be},
		Policies: map[string]sandbox.BackendPolicy{name: pol},
		HostEnv:  os.Environ(),
		StateDir: filepath.Join(stateDir, "processes"),
		Logger:   logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Shutdown(context.Background()) })
	cfg := host.Config{
		Engine:      enginetest.HostEngine(),
		CacheDir:    moduleCache(),
		Registry:    reg,
		StateDir:    stateDir,
		Logger:      logger,
		CallTimeout: 30 * time.Second,
		Backends:    []string{"local", name},
	}
	if mut != nil {
		mut(&cfg)
	}
	h, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	for _, d := range capsuleDirs {
		if _, err := h.Load(context.Background(), d); err != nil {
			t.Fatalf("load %s: %v", d, err)
		}
	}
	return &env{t: t, h: h}
}

// persistentStory spawns a ticking persistent process, reads it from a
// pooled instance other than the spawner's, checks its status there, and
// stops it, getting the SIGTERM exit. firstLines are what the script
// prints before ticking.
func persistentStory(t *testing.T, e *env, prelude string, firstLines string) {
	t.Helper()
	id, i1 := tc[string](e, "alice", "spawn_persistent", map[string]any{
		"request": sh(prelude + "while true; do echo tick; sleep 0.1; done"),
		"options": map[string]any{"label": "ticker"},
	})
	var chunk process.LogChunk
	var i2 uint64
	deadline := time.Now().Add(15 * time.Second)
	// read_since does not drain: repeat until ticks arrived and the call
	// landed on an instance other than the spawner's.
	for (!strings.Contains(string(chunk.Data), "tick\ntick\n") || i2 == i1) && time.Now().Before(deadline) {
		chunk, i2 = tc[process.LogChunk](e, "alice", "read_since", map[string]any{"id": id, "stream": "stdout", "max": 4096})
		time.Sleep(20 * time.Millisecond)
	}
	if i2 == i1 {
		t.Fatalf("never read from an instance other than the spawner's (%d)", i1)
	}
	if !strings.HasPrefix(string(chunk.Data), firstLines+"tick\ntick\n") {
		t.Fatalf("read_since from instance %d = %q; want %q then ticks", i2, chunk.Data, firstLines)
	}
	// Later output only, from the cursor.
	var next process.LogChunk
	for !strings.Contains(string(next.Data), "tick") && time.Now().Before(deadline) {
		next, _ = tc[process.LogChunk](e, "alice", "read_since", map[string]any{"id": id, "stream": "stdout", "cursor": chunk.Next, "max": 4096})
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Trim(string(next.Data), "tick\n") != "" || next.Data == nil {
		t.Errorf("read from cursor = %q, want only ticks", next.Data)
	}
	info, i3 := tc[process.ProcessInfo](e, "alice", "status", map[string]any{"id": id})
	if info.Phase != process.PhaseRunning || info.Label != "ticker" {
		t.Errorf("status = %+v", info)
	}
	tcErr(e, "bob", "testcap", "status", map[string]any{"id": id}, process.ErrNoSuchProcess)
	ex, i4 := tc[process.ExitInfo](e, "alice", "stop", map[string]any{"id": id, "grace_ms": 5000})
	if ex.Signal == nil || *ex.Signal != int32(syscall.SIGTERM) {
		t.Errorf("stop exit = %+v (code %d), want SIGTERM", ex, code(ex))
	}
	if info, _ = tc[process.ProcessInfo](e, "alice", "status", map[string]any{"id": id}); info.Phase != process.PhaseExited {
		t.Errorf("after stop: %+v", info)
	}
	tc[any](e, "alice", "release", map[string]any{"id": id})
	t.Logf("instances: spawn %d, read %d, status %d, stop %d", i1, i2, i3, i4)
}

// ownerOf is a file's host uid.
func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

func TestSandboxedOCI(t *testing.T) {
	needRoot(t, "runc", "gcc")
	rfs, err := rootfs.Cached(rootfs.DefaultBusybox, filepath.Join(os.TempDir(), "capsule-test-cache"))
	if err != nil {
		t.Skipf("SKIP LOUDLY: busybox rootfs: %v (apt-get install busybox-static)", err)
	}
	state := t.TempDir()
	be, err := oci.New(oci.Options{
		Root: filepath.Join(state, "oci"),
		Init: ociInit(t),
		Profiles: map[string]oci.Profile{"test": {
			Rootfs:  rfs,
			UserNS:  &oci.IDMap{HostUID: sandboxHostUID, HostGID: sandboxHostUID, Size: 65536},
			Limits:  sandbox.Limits{MemoryBytes: 256 << 20, Pids: 256},
			Network: oci.NetworkNone,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := sandboxEnv(t, state, "oci", be, nil, testcapAs(t, "testcap", `exec = ["/bin/sh"]
allow_persistent = true
backend = "oci"
profile = "test"
`))
	c, _ := e.h.Capsule("testcap")
	if p := c.Policy(); p.ExecRoot != rfs || p.WorkspaceOwner == nil || p.WorkspaceOwner.UID != sandboxHostUID {
		t.Fatalf("policy %+v: want exec root %s and the workspace owned by %d", p, rfs, sandboxHostUID)
	}

	// The process runs in the image, in the in-container workspace, as
	// container root (host uid 100000): argv[0] and cwd were mapped.
	persistentStory(t, e, `pwd; id -u; echo "$0"; `, "/workspace\n0\n/bin/sh\n")

	ws := filepath.Join(state, "workspaces", "testcap", "alice")
	if u := ownerOf(t, ws); u != sandboxHostUID {
		t.Errorf("principal workspace owned by %d, want %d", u, sandboxHostUID)
	}
	// Files written in the container land in the principal's workspace.
	in := sh("mkdir -p sub && cd sub && pwd && echo hello > f")
	r, _ := tc[process.ProcessResult](e, "alice", "spawn", in)
	if code(r.Exit) != 0 || string(r.Stdout) != "/workspace/sub\n" {
		t.Errorf("spawn = %q %q %+v", r.Stdout, r.Stderr, r.Exit)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "sub", "f")); err != nil || string(b) != "hello\n" {
		t.Errorf("file written in the container: %q, %v", b, err)
	}
	// A guest cwd maps the same way.
	in = sh("pwd")
	in["cwd"] = "sub"
	if r, _ = tc[process.ProcessResult](e, "alice", "spawn", in); string(r.Stdout) != "/workspace/sub\n" {
		t.Errorf("cwd sub: pwd = %q %q", r.Stdout, r.Stderr)
	}
	// exec is enforced against the image: other applets of the same
	// busybox, and the host's programs, are denied.
	for _, cmd := range []string{"/bin/cat", "/bin/busybox", "cat", "/usr/bin/env"} {
		tcErr(e, "alice", "testcap", "spawn", map[string]any{"cmd": cmd}, process.ErrCapabilityDenied)
	}
	// A bare name is looked up inside the image, on the host's PATH (a
	// guest cannot set PATH: it would choose what an allowed program's
	// helpers are).
	tcErr(e, "alice", "testcap", "spawn", map[string]any{"cmd": "sh", "env": []map[string]string{{"key": "PATH", "value": "/bin"}}}, process.ErrInvalidInput)
	r, _ = tc[process.ProcessResult](e, "alice", "spawn", map[string]any{"cmd": "sh", "args": []string{"-c", "echo $0"}})
	if string(r.Stdout) != "/bin/sh\n" {
		t.Errorf("sh on PATH: %q %q %+v", r.Stdout, r.Stderr, r.Exit)
	}
}

// hostDir is a temporary directory outside /tmp: bwrap gives the sandbox
// a private /tmp, so a test path under it would prove nothing about masks
// and the read-only root.
func hostDir(t *testing.T, pattern string) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	// The sandbox reports real paths (pwd): compare against those.
	if r, err := filepath.EvalSymlinks(d); err == nil {
		d = r
	}
	return d
}

func TestSandboxedBwrap(t *testing.T) {
	needRoot(t, "bwrap")
	state := hostDir(t, "capsule-e2e-state-")
	// The operator's home, with a planted credential.
	home := hostDir(t, "capsule-e2e-home-")
	secret := "SECRET-" + hex.EncodeToString([]byte(t.Name()))
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(home, ".ssh", "id_ed25519")
	if err := os.WriteFile(keyFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := hostDir(t, "capsule-e2e-outside-")
	be, err := bwrap.New(bwrap.Options{StateDir: state, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	e := sandboxEnv(t, state, "bwrap", be, nil, testcapAs(t, "testcap", `exec = ["/bin/sh"]
allow_persistent = true
backend = "bwrap"
`))
	ws := filepath.Join(state, "workspaces", "testcap", "alice")
	persistentStory(t, e, "pwd; ", ws+"\n")

	// The masked credential is unreadable; the host can read it.
	if b, err := os.ReadFile(keyFile); err != nil || string(b) != secret {
		t.Fatalf("planted secret: %q, %v", b, err)
	}
	r, _ := tc[process.ProcessResult](e, "alice", "spawn", sh(fmt.Sprintf("cat %s; ls -A %s; echo rc=$?", keyFile, filepath.Dir(keyFile))))
	if strings.Contains(string(r.Stdout)+string(r.Stderr), secret) || strings.Contains(string(r.Stdout), "id_ed25519") {
		t.Errorf("the sandbox read the masked secret: %q %q", r.Stdout, r.Stderr)
	}
	// Writes: the workspace yes; a host directory, the host state dir, a
	// sibling principal's workspace and /tmp never reach the host.
	bob := filepath.Join(state, "workspaces", "testcap", "bob")
	if err := os.MkdirAll(bob, 0o700); err != nil {
		t.Fatal(err)
	}
	targets := []string{filepath.Join(outside, "pwned"), filepath.Join(state, "pwned"), filepath.Join(bob, "pwned"), "/etc/capsule-e2e-pwned"}
	script := "echo ok > inside; echo tmp > /tmp/capsule-e2e-pwned"
	for _, p := range targets {
		script += fmt.Sprintf("; echo pwned > %s", p)
	}
	r, _ = tc[process.ProcessResult](e, "alice", "spawn", sh(script+"; true"))
	if b, err := os.ReadFile(filepath.Join(ws, "inside")); err != nil || string(b) != "ok\n" {
		t.Errorf("workspace write: %q, %v (%q)", b, err, r.Stderr)
	}
	for _, p := range append(targets, "/tmp/capsule-e2e-pwned") {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("the sandbox wrote %s on the host", p)
		}
	}
	if !strings.Contains(string(r.Stderr), "Read-only file system") {
		t.Errorf("stderr %q: want read-only refusals", r.Stderr)
	}
}

// The network reaches a sandboxed process only when the manifest asks and
// the host allows: a listener on the host's 127.0.0.1 is reachable from
// the granted capsule's bwrap sandbox, not from the other's, on one host.
func TestSandboxedBwrapNetwork(t *testing.T) {
	needRoot(t, "bwrap", "busybox")
	port, _ := testutil.Greeter(t, "hello-from-host\n")
	state := hostDir(t, "capsule-e2e-state-")
	be, err := bwrap.New(bwrap.Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	const caps = "exec = [\"/bin/sh\"]\nbackend = \"bwrap\"\n"
	e := sandboxEnv(t, state, "bwrap", be, func(c *host.Config) { c.AllowNetwork = true },
		testcapAs(t, "testcap", caps+"network = true\n"), testcapAs(t, "offline", caps))
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	connect := sh(fmt.Sprintf("%s nc -w 3 127.0.0.1 %d </dev/null; echo rc=$?", busybox, port))
	for _, tt := range []struct {
		capsule string
		reach   bool
	}{{"testcap", true}, {"offline", false}} {
		var r resp[process.ProcessResult]
		e.call("alice", tt.capsule, "spawn", connect, &r)
		if r.Error != nil {
			t.Fatalf("%s: %v", tt.capsule, r.Error)
		}
		got := strings.Contains(string(r.OK.Stdout), "hello-from-host")
		if got != tt.reach {
			t.Errorf("%s (network granted: %v) reached the host listener: %v (%q %q)", tt.capsule, tt.reach, got, r.OK.Stdout, r.OK.Stderr)
		}
	}
	// Without allow_network the manifest's request is refused at load.
	e2 := sandboxEnv(t, hostDir(t, "capsule-e2e-state-"), "bwrap", be, nil)
	if _, err := e2.h.Load(context.Background(), testcapAs(t, "testcap", caps+"network = true\n")); !errors.Is(err, host.ErrPolicy) ||
		!strings.Contains(err.Error(), "capabilities.network: network access is not allowed on this host") {
		t.Errorf("network without allow_network: %v", err)
	}
}

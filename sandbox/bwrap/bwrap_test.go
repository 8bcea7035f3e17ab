package bwrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/backendtest"
)

const bb = "/bin/busybox"

func needBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIP LOUDLY: bwrap not installed (apt-get install bubblewrap); CI installs it")
	}
	if _, err := os.Stat(bb); err != nil {
		t.Skip("SKIP LOUDLY: /bin/busybox missing (apt-get install busybox-static); CI installs it")
	}
}

type env struct {
	b         *Backend
	home      string
	state     string
	workspace string
	spill     string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	needBwrap(t)
	// Not under /tmp: that is a private tmpfs inside the sandbox, which
	// would hide the planted files instead of testing the masks.
	dir, err := os.MkdirTemp("/var/tmp", "capsule-bwrap-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{home: filepath.Join(dir, "home"), state: filepath.Join(dir, "state"), workspace: filepath.Join(dir, "state", "ws", "cap"), spill: filepath.Join(dir, "spill")}
	for _, d := range []string{e.home, e.workspace, e.spill, filepath.Join(e.home, ".ssh"), filepath.Join(e.home, ".config", "gcloud")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(e.home, ".ssh", "id_ed25519"), []byte("SECRET-SSH"), 0o600)
	os.WriteFile(filepath.Join(e.home, ".netrc"), []byte("SECRET-NETRC"), 0o600)
	os.WriteFile(filepath.Join(e.home, ".config", "gcloud", "creds"), []byte("SECRET-GCLOUD"), 0o600)
	os.WriteFile(filepath.Join(e.home, "notes"), []byte("visible"), 0o600)
	os.WriteFile(filepath.Join(e.state, "registry.db"), []byte("SECRET-STATE"), 0o600)
	var b *Backend
	b, err = New(Options{StateDir: e.state, Home: e.home, Mask: []string{filepath.Join(dir, "extra")}})
	if err != nil {
		t.Fatal(err)
	}
	e.b = b
	return e
}

func (e *env) spec(script string) sandbox.ProcessSpec {
	return sandbox.ProcessSpec{
		Argv:      []string{bb, "sh", "-c", script},
		Cwd:       e.workspace,
		Env:       []string{"PATH=/usr/bin:/bin"},
		Stdin:     sandbox.StdinSpec{Mode: sandbox.StdinClosed},
		Output:    sandbox.OutputSpec{RingBytes: 1 << 20, SpillBytes: 1 << 20, Overflow: sandbox.DropOldest, SpillDir: e.spill},
		Grace:     2 * time.Second,
		Drain:     2 * time.Second,
		Isolation: sandbox.IsolationSpec{Workspace: e.workspace},
	}
}

func run(t *testing.T, e *env, spec sandbox.ProcessSpec) (string, string, sandbox.Exit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut := readAll(t, h.Stdout()), readAll(t, h.Stderr())
	if err := e.b.Cleanup(ctx, h.Ref()); err != nil {
		t.Fatal(err)
	}
	return out, errOut, ex
}

func readAll(t testing.TB, l sandbox.Log) string {
	t.Helper()
	b, _ := backendtest.ReadAll(t, l)
	return string(b)
}

func TestExitCodeAndOutput(t *testing.T) {
	e := newEnv(t)
	out, errOut, ex := run(t, e, e.spec("echo hi; pwd; echo err >&2; exit 42"))
	if ex.Code != 42 || ex.Signal != 0 || out != "hi\n"+e.workspace+"\n" || errOut != "err\n" {
		t.Fatalf("exit %+v out %q err %q", ex, out, errOut)
	}
}

func TestEscapeMaskedSecrets(t *testing.T) {
	e := newEnv(t)
	script := fmt.Sprintf(`cat %[1]s/notes; echo
for f in %[1]s/.ssh/id_ed25519 %[1]s/.netrc %[1]s/.config/gcloud/creds %[2]s/registry.db; do cat $f 2>/dev/null; done
ls -A %[1]s/.ssh %[2]s; echo done`, e.home, e.state)
	out, errOut, ex := run(t, e, e.spec(script))
	if strings.Contains(out, "SECRET") {
		t.Fatalf("secret leaked: %q", out)
	}
	if ex.Code != 0 || !strings.Contains(out, "visible") || !strings.Contains(out, "done") {
		t.Fatalf("exit %+v out %q err %q", ex, out, errOut)
	}
	// The state dir is masked, yet the workspace inside it is there.
	if !strings.Contains(out, "ws") {
		t.Fatalf("workspace mount point missing in the masked state dir: %q", out)
	}
}

func TestEscapeWriteOutsideWorkspace(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Dir(e.home)
	script := fmt.Sprintf(`for f in /etc/evil /usr/evil %s/evil %s/evil /proc/sys/kernel/evil; do
  if echo x > $f 2>/dev/null; then echo "WROTE $f"; fi
done
echo ok > ok && echo ws-ok
echo t > /tmp/t && echo tmp-ok`, outside, e.home)
	out, errOut, ex := run(t, e, e.spec(script))
	if ex.Code != 0 || strings.Contains(out, "WROTE") || !strings.Contains(out, "ws-ok") || !strings.Contains(out, "tmp-ok") {
		t.Fatalf("exit %+v out %q err %q", ex, out, errOut)
	}
	for _, p := range []string{"/etc/evil", filepath.Join(outside, "evil"), filepath.Join(e.home, "evil"), "/tmp/t"} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Fatalf("%s was written on the host", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.workspace, "ok")); err != nil || string(b) != "ok\n" {
		t.Fatalf("workspace write missing: %q %v", b, err)
	}
}

func TestEscapeNetwork(t *testing.T) {
	port, _ := testutil.Greeter(t, "HELLO-FROM-HOST\n")
	e := newEnv(t)
	script := fmt.Sprintf("%s nc -w 2 127.0.0.1 %d </dev/null; echo rc=$?", bb, port)
	out, _, _ := run(t, e, e.spec(script))
	if strings.Contains(out, "HELLO-FROM-HOST") {
		t.Fatalf("reached the host loopback without the network: %q", out)
	}
	spec := e.spec(script)
	spec.Isolation.Network = true
	out, errOut, _ := run(t, e, spec)
	if !strings.Contains(out, "HELLO-FROM-HOST") {
		t.Fatalf("granted network did not reach the host: %q %q", out, errOut)
	}
}

func TestEscapeForkBomb(t *testing.T) {
	e := newEnv(t)
	spec := e.spec(`echo start; b() { b | b & }; b; sleep 2; echo survived`)
	spec.Limits.Pids = 32
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// The bound is reached when the bomb's shells report a refused fork;
	// how long that takes depends on the machine's load, so poll for it
	// (within the context's deadline) rather than sleep a fixed time.
	for !strings.Contains(readAll(t, h.Stderr()), "fork") {
		select {
		case <-ctx.Done():
			t.Fatalf("the pids limit was never hit within the deadline: %q", readAll(t, h.Stderr()))
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The bomb is at its ceiling now: the host must still be able to spawn.
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Fatalf("host cannot spawn during the bomb: %v", err)
	}
	if _, err := h.Terminate(ctx, sandbox.Force); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Cleanup(ctx, h.Ref()); err != nil {
		t.Fatal(err)
	}
}

func TestEscapeMemory(t *testing.T) {
	e := newEnv(t)
	spec := e.spec(bb + " dd if=/dev/zero of=/dev/null bs=128M count=1")
	spec.Argv = []string{bb, "dd", "if=/dev/zero", "of=/dev/null", "bs=128M", "count=1"}
	spec.Limits.MemoryBytes = 32 << 20
	_, errOut, ex := run(t, e, spec)
	if ex.KilledFor != sandbox.LimitMemory {
		t.Fatalf("exit %+v, want KilledFor=memory (stderr %q)", ex, errOut)
	}
}

func TestTerminate(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Run("cooperative", func(t *testing.T) {
		spec := e.spec("exec " + bb + " sleep 100")
		h, err := e.b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		ex, err := h.Terminate(ctx, sandbox.Graceful)
		if err != nil || ex.Signal != syscall.SIGTERM {
			t.Fatalf("graceful: %+v %v", ex, err)
		}
		ins, err := e.b.Inspect(ctx, h.Ref())
		if err != nil || ins.Phase != sandbox.PhaseExited || *ins.Exit != ex {
			t.Fatalf("inspect %+v %v", ins, err)
		}
		e.b.Cleanup(ctx, h.Ref())
	})
	// A SIGTERM sent while bwrap is still setting up the sandbox (only
	// bwrap's own processes exist; its init, pid 1 of the namespace,
	// ignores signals it has no handler for) must still reach the
	// program once it runs, not be lost until the grace timeout.
	t.Run("right-after-start", func(t *testing.T) {
		for i := range 10 {
			spec := e.spec("exec " + bb + " sleep 100")
			h, err := e.b.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			ex, err := h.Terminate(ctx, sandbox.Graceful)
			if err != nil || ex.Signal != syscall.SIGTERM {
				h.Terminate(ctx, sandbox.Force)
				e.b.Cleanup(ctx, h.Ref())
				t.Fatalf("run %d: graceful stop right after start: %+v %v", i, ex, err)
			}
			e.b.Cleanup(ctx, h.Ref())
		}
	})
	t.Run("ignores-term", func(t *testing.T) {
		spec := e.spec(`trap "" TERM; echo ready; ` + bb + ` sleep 100 & wait`)
		spec.Grace = 300 * time.Millisecond
		h, err := e.b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		for !strings.Contains(readAll(t, h.Stdout()), "ready") {
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := h.Terminate(ctx, sandbox.Graceful); !errors.Is(err, sandbox.ErrGracefulTimeout) {
			t.Fatalf("want ErrGracefulTimeout, got %v", err)
		}
		ex, err := h.Terminate(ctx, sandbox.Force)
		if err != nil || ex.Signal != syscall.SIGKILL {
			t.Fatalf("force: %+v %v", ex, err)
		}
		e.b.Cleanup(ctx, h.Ref())
	})
}

func TestBadPaths(t *testing.T) {
	e := newEnv(t)
	for name, tc := range map[string]struct {
		mut  func(*sandbox.ProcessSpec)
		want error
	}{
		"relative workspace": {func(s *sandbox.ProcessSpec) { s.Isolation.Workspace = "ws" }, sandbox.ErrInvalidSpec},
		"quote":              {func(s *sandbox.ProcessSpec) { s.Isolation.Workspace = e.workspace + `"` }, sandbox.ErrInvalidSpec},
		"backslash":          {func(s *sandbox.ProcessSpec) { s.Isolation.Workspace = e.workspace + `\x` }, sandbox.ErrInvalidSpec},
		"cwd outside":        {func(s *sandbox.ProcessSpec) { s.Cwd = e.home }, sandbox.ErrBoundaryEscape},
		"unclean cwd":        {func(s *sandbox.ProcessSpec) { s.Cwd = e.workspace + "/../.." }, sandbox.ErrBoundaryEscape},
	} {
		t.Run(name, func(t *testing.T) {
			spec := e.spec("true")
			tc.mut(&spec)
			if _, err := e.b.Start(context.Background(), spec); !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
	for _, m := range []string{"rel/path", "/a\"b", "/a\\b", "/a\x00b"} {
		if _, err := New(Options{Mask: []string{m}}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Fatalf("mask %q: %v", m, err)
		}
	}
}

// TestGrandchildDiesWithCommand is the bwrap form of the conformance case
// "grandchild holds stdout": the descendant does not linger until the
// drain bound, it dies with the command (pid namespace), and Wait returns
// the command's exit at once.
func TestGrandchildDiesWithCommand(t *testing.T) {
	e := newEnv(t)
	marker := fmt.Sprintf("capsule-holder-%d-%d", os.Getpid(), time.Now().UnixNano())
	spec := e.spec("")
	spec.Argv = []string{bb, "sh", "-c", `( exec "$0" sh -c 'while :; do sleep 1; done' "$1" ) & echo early; exit 5`, bb, marker}
	spec.Drain = 5 * time.Second
	t0 := time.Now()
	out, _, ex := run(t, e, spec)
	if ex.Code != 5 || out != "early\n" {
		t.Fatalf("exit %+v out %q", ex, out)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("Wait took %v: the holder should die with the command", d)
	}
	ents, _ := os.ReadDir("/proc")
	for _, en := range ents {
		if b, err := os.ReadFile("/proc/" + en.Name() + "/cmdline"); err == nil && strings.Contains(string(b), marker) {
			t.Fatalf("descendant %s survived the command", en.Name())
		}
	}
}

// TestEscapeRuntimeSockets: the host root is read-only in the sandbox, but
// connect() works on a read-only mount, so the unix sockets of the
// operator's runtime dir (the daemon's API, the session bus) would let a
// sandboxed process run anything outside. They must not be visible.
func TestEscapeRuntimeSockets(t *testing.T) {
	needBwrap(t)
	rt, err := os.MkdirTemp("/var/tmp", "capsule-bwrap-xdg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(rt) })
	if err := os.MkdirAll(filepath.Join(rt, "capsule-host"), 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(rt, "capsule-host", "capsule-host.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("XDG_RUNTIME_DIR", rt)
	e := newEnv(t)
	out, errOut, ex := run(t, e, e.spec(fmt.Sprintf(`if [ -S %s ]; then echo SOCKET-VISIBLE; fi; ls -A %s; echo done`, sock, rt)))
	if strings.Contains(out, "SOCKET-VISIBLE") || strings.Contains(out, "capsule-host") {
		t.Fatalf("runtime dir socket visible in the sandbox: %q", out)
	}
	if ex.Code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("exit %+v out %q err %q", ex, out, errOut)
	}
	// A socket file (like /run/docker.sock) masked by itself.
	other := filepath.Join(e.home, "engine.sock")
	l2, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if e.b, err = New(Options{StateDir: e.state, Home: e.home, Mask: []string{other}}); err != nil {
		t.Fatal(err)
	}
	out, errOut, ex = run(t, e, e.spec(fmt.Sprintf(`if [ -S %s ]; then echo SOCKET-VISIBLE; fi; echo done`, other)))
	if strings.Contains(out, "SOCKET-VISIBLE") || ex.Code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("masked socket file: exit %+v out %q err %q", ex, out, errOut)
	}
}

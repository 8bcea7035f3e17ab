package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, e.spec("/bin/sh", "-c", "echo hello; id; pwd; echo oops >&2; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Code != 3 || ex.Signal != 0 {
		t.Fatalf("exit %+v", ex)
	}
	out := readAll(t, h.Stdout())
	if !strings.Contains(out, "hello") || !strings.Contains(out, "/workspace") {
		t.Fatalf("stdout %q", out)
	}
	if got := readAll(t, h.Stderr()); got != "oops\n" {
		t.Fatalf("stderr %q", got)
	}
	if err := e.b.Cleanup(ctx, h.Ref()); err != nil {
		t.Fatal(err)
	}
}

func startWait(t *testing.T, e *env, spec sandbox.ProcessSpec) (sandbox.Handle, sandbox.Exit) {
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
	t.Cleanup(func() {
		if err := e.b.Cleanup(context.Background(), h.Ref()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return h, ex
}

func TestSpawnErrorNotFound(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.b.Start(context.Background(), e.spec("/bin/does-not-exist"))
	var se *sandbox.SpawnError
	if !errors.As(err, &se) || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, sandbox.ErrSpawn) {
		t.Fatalf("want SpawnError/ErrNotExist, got %v", err)
	}
	// Nothing is left behind: no state, no bundle.
	ents, _ := os.ReadDir(filepath.Join(e.opts.Root, "containers"))
	bents, _ := os.ReadDir(filepath.Join(e.opts.Root, "bundles"))
	if len(ents)+len(bents) != 0 {
		t.Fatalf("leftovers: %d state dirs, %d bundles", len(ents), len(bents))
	}
}

func TestStdinOpenEcho(t *testing.T) {
	e := newEnv(t, nil)
	spec := e.spec("/bin/cat")
	spec.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen, Data: []byte("first\n")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Stdin().Write(ctx, []byte("second\n")); err != nil {
		t.Fatal(err)
	}
	h.Stdin().Close()
	ex, err := h.Wait(ctx)
	if err != nil || ex.Code != 0 {
		t.Fatalf("exit %+v %v", ex, err)
	}
	if got := readAll(t, h.Stdout()); got != "first\nsecond\n" {
		t.Fatalf("stdout %q", got)
	}
	if err := e.b.Cleanup(ctx, h.Ref()); err != nil {
		t.Fatal(err)
	}
}

func TestLifecycleAttachInspectFresh(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, e.spec("/bin/sh", "-c", "echo up; sleep 1; exit 5"))
	if err != nil {
		t.Fatal(err)
	}
	ref := h.Ref()
	if ref.Lifetime != sandbox.LifetimeBackend {
		t.Fatalf("lifetime %v", ref.Lifetime)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("release of a running backend-lifetime handle: %v", err)
	}
	if err := e.b.Cleanup(ctx, ref); !errors.Is(err, sandbox.ErrRunning) {
		t.Fatalf("cleanup while running: %v", err)
	}
	// A fresh Backend value over the same Root, and this process forgetting
	// what it knows: only the disk remains (as after a host restart).
	forgetLive(e.b.stateDir(ref.ID))
	b2, err := New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := b2.Inspect(ctx, ref)
	if err != nil || ins.Phase != sandbox.PhaseRunning {
		t.Fatalf("inspect running: %+v %v", ins, err)
	}
	h2, err := b2.Attach(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := h2.Wait(ctx)
	if err != nil || ex.Code != 5 {
		t.Fatalf("wait from fresh attach: %+v %v", ex, err)
	}
	// The original handle sees the same exit.
	ex1, err := h.Wait(ctx)
	if err != nil || ex1 != ex {
		t.Fatalf("original handle: %+v %v vs %+v", ex1, err, ex)
	}
	forgetLive(e.b.stateDir(ref.ID))
	b3, _ := New(e.opts)
	ins, err = b3.Inspect(ctx, ref)
	if err != nil || ins.Phase != sandbox.PhaseExited || *ins.Exit != ex {
		t.Fatalf("inspect exited: %+v %v", ins, err)
	}
	if err := b3.Cleanup(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := b3.Cleanup(ctx, ref); err != nil {
		t.Fatalf("second cleanup: %v", err)
	}
	ins, err = b3.Inspect(ctx, ref)
	if err != nil || ins.Phase != sandbox.PhaseMissing {
		t.Fatalf("inspect after cleanup: %+v %v", ins, err)
	}
	if _, err := b3.Attach(ctx, ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("attach after cleanup: %v", err)
	}
}

func TestTerminate(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("graceful-trap", func(t *testing.T) {
		h, err := e.b.Start(ctx, e.spec("/bin/sh", "-c", `trap "exit 7" TERM; echo ready; while :; do sleep 0.05; done`))
		if err != nil {
			t.Fatal(err)
		}
		defer e.b.Cleanup(ctx, h.Ref())
		waitOutput(t, h.Stdout(), "ready")
		ex, err := h.Terminate(ctx, sandbox.Graceful)
		if err != nil || ex.Code != 7 {
			t.Fatalf("graceful: %+v %v", ex, err)
		}
		ex2, err := h.Terminate(ctx, sandbox.Force)
		if err != nil || ex2 != ex {
			t.Fatalf("force after exit: %+v %v", ex2, err)
		}
	})
	t.Run("ignores-term", func(t *testing.T) {
		spec := e.spec("/bin/sh", "-c", `trap "" TERM; echo ready; sleep 1000 & wait`)
		spec.Grace = 300 * time.Millisecond
		h, err := e.b.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer e.b.Cleanup(ctx, h.Ref())
		waitOutput(t, h.Stdout(), "ready")
		if _, err := h.Terminate(ctx, sandbox.Graceful); !errors.Is(err, sandbox.ErrGracefulTimeout) {
			t.Fatalf("want graceful timeout, got %v", err)
		}
		ex, err := h.Terminate(ctx, sandbox.Force)
		if err != nil || ex.Signal != syscall.SIGKILL {
			t.Fatalf("force: %+v %v", ex, err)
		}
	})
}

func waitOutput(t *testing.T, l sandbox.Log, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		ch := l.Changed()
		c, _ := l.ReadFrom(0, 1<<20)
		if strings.Contains(string(c.Data), want) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("output never contained %q: %q", want, c.Data)
		}
	}
}

// TestCrossProcessAttach attaches from another OS process (this test
// binary re-run as a helper), which is not the container's parent, nor
// its monitor's: the exit reaches it through the monitor's exit record.
func TestCrossProcessAttach(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 3 s: the helper (a race-built binary) may take a second or more to
	// start on a loaded machine; it accepts an already exited container
	// too, whose exit it then gets from the record alone.
	h, err := e.b.Start(ctx, e.spec("/bin/sh", "-c", "sleep 3; exit 6"))
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAttach$", "-test.v")
	cmd.Env = append(os.Environ(), "CAPSULE_OCI_HELPER_ROOT="+e.opts.Root, "CAPSULE_OCI_HELPER_ID="+h.Ref().ID)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "helper-exit code=6 signal=0") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if err := e.b.Cleanup(ctx, h.Ref()); err != nil {
		t.Fatal(err)
	}
}

func TestHelperAttach(t *testing.T) {
	root, id := os.Getenv("CAPSULE_OCI_HELPER_ROOT"), os.Getenv("CAPSULE_OCI_HELPER_ID")
	if root == "" {
		t.Skip("helper process for TestCrossProcessAttach")
	}
	b, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	ref := sandbox.Ref{Backend: "oci", ID: id, Lifetime: sandbox.LifetimeBackend}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ins, err := b.Inspect(ctx, ref)
	if err != nil || ins.Phase != sandbox.PhaseRunning && ins.Phase != sandbox.PhaseExited {
		t.Fatalf("inspect: %+v %v", ins, err)
	}
	h, err := b.Attach(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ins, err = b.Inspect(ctx, ref)
	if err != nil || ins.Phase != sandbox.PhaseExited || *ins.Exit != ex {
		t.Fatalf("inspect after exit: %+v %v", ins, err)
	}
	fmt.Printf("helper-exit code=%d signal=%d\n", ex.Code, int(ex.Signal))
}

// TestNoInitPID1 documents the semantics without capsule-oci-init: the
// process is its container's pid 1, so the kernel drops the signals it
// has no handler for. A graceful stop of a plain sleep times out (force
// still works); exit codes are unchanged.
func TestNoInitPID1(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Init, o.NoInit = "", true })
	_, ex := startWait(t, e, e.spec("/bin/sh", "-c", "exit 9"))
	if ex.Code != 9 {
		t.Fatalf("exit %+v", ex)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := e.spec("/bin/sleep", "100")
	spec.Grace = 300 * time.Millisecond
	h, err := e.b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer e.b.Cleanup(ctx, h.Ref())
	if _, err := h.Terminate(ctx, sandbox.Graceful); !errors.Is(err, sandbox.ErrGracefulTimeout) {
		t.Fatalf("pid-1 sleep and SIGTERM: %v, want ErrGracefulTimeout", err)
	}
	if ex, err := h.Terminate(ctx, sandbox.Force); err != nil || ex.Signal != syscall.SIGKILL {
		t.Fatalf("force: %+v %v", ex, err)
	}
}

// TestRunsc runs the lifecycle and the network escape under gVisor when a
// runsc binary is available.
func TestRunsc(t *testing.T) {
	runsc := os.Getenv("CAPSULE_RUNSC")
	if runsc == "" {
		runsc, _ = exec.LookPath("runsc")
	}
	if runsc == "" {
		t.Skip("SKIP LOUDLY: runsc (gVisor) not found. Enable with: " +
			"CGO_ENABLED=0 go build -o /usr/local/bin/runsc gvisor.dev/gvisor/runsc@v0.0.0-20260905035102-160fafc42237 " +
			"(inside a module; ~80 s, 100 MB), or set CAPSULE_RUNSC=/path/to/runsc")
	}
	e := newEnv(t, func(o *Options) {
		o.Runtimes = map[string]string{"runsc": runsc}
		p := o.Profiles["default"]
		p.Runtime = "runsc"
		o.Profiles["default"] = p
	})
	h, ex := startWait(t, e, e.spec("/bin/sh", "-c", "uname -r; echo hi > /workspace/x; exit 4"))
	if ex.Code != 4 {
		t.Fatalf("exit %+v stderr %q", ex, readAll(t, h.Stderr()))
	}
	t.Logf("runsc kernel: %q", readAll(t, h.Stdout()))

	// A start that fails (pids too small for the sentry) leaves no cgroup
	// behind: runsc leaks them; Start's cleanup removes them.
	count := func() int {
		n := 0
		for _, d := range cgroups.SelfDirs("capsule-oci") {
			ents, _ := os.ReadDir(d)
			for _, en := range ents {
				if en.IsDir() && (strings.HasPrefix(en.Name(), "capsule-") || strings.HasPrefix(en.Name(), "runsc-")) {
					n++
				}
			}
		}
		return n
	}
	before := count()
	spec := e.spec("/bin/true")
	spec.Limits.Pids = 2
	if h, err := e.b.Start(context.Background(), spec); err == nil {
		h.Wait(context.Background())
		e.b.Cleanup(context.Background(), h.Ref())
		t.Log("runsc started under pids=2 after all")
	}
	if after := count(); after > before {
		t.Fatalf("failed runsc start leaked %d cgroup dirs", after-before)
	}
}

// TestHammer starts containers concurrently, each waited, inspected and
// attached from several goroutines and fresh Backend values at once.
func TestHammer(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const n = 8
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			errs <- func() error {
				h, err := e.b.Start(ctx, e.spec("/bin/sh", "-c", fmt.Sprintf("echo %d; exit %d", i, i)))
				if err != nil {
					return err
				}
				var wg sync.WaitGroup
				exits := make([]sandbox.Exit, 4)
				werrs := make([]error, 4)
				for j := range exits {
					wg.Add(1)
					go func() {
						defer wg.Done()
						b2, err := New(e.opts)
						if err != nil {
							werrs[j] = err
							return
						}
						h2, err := b2.Attach(ctx, h.Ref())
						if err != nil {
							werrs[j] = err
							return
						}
						if _, err := b2.Inspect(ctx, h.Ref()); err != nil {
							werrs[j] = err
							return
						}
						exits[j], werrs[j] = h2.Wait(ctx)
					}()
				}
				wg.Wait()
				for j := range exits {
					if werrs[j] != nil {
						return werrs[j]
					}
					if exits[j].Code != i || exits[j] != exits[0] {
						return fmt.Errorf("container %d waiter %d: %+v vs %+v", i, j, exits[j], exits[0])
					}
				}
				if got := readAll(t, h.Stdout()); got != fmt.Sprintf("%d\n", i) {
					return fmt.Errorf("container %d stdout %q", i, got)
				}
				return e.b.Cleanup(ctx, h.Ref())
			}()
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(e.opts.Root, "containers"))
	if len(ents) != 0 {
		t.Fatalf("%d state dirs left after cleanup", len(ents))
	}
}

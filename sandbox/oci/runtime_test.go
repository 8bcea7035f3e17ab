package oci

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The runtimes' own words (runc 1.1, runsc) for the failures the package
// decides on, and what the one classifier makes of them.
func TestClassifyRuntime(t *testing.T) {
	for _, tc := range []struct {
		op, stderr string
		want       error // nil: unclassified
	}{
		{"state", "container does not exist", errNoContainer},
		{"kill", `time="2026-01-01T00:00:00Z" level=error msg="container does not exist"`, errNoContainer},
		{"delete", "loading container: file does not exist", errNoContainer},
		{"state", "open /run/runc/x/state.json: permission denied", nil},
		// A stopped container and a running one are told apart by `state`,
		// never by these.
		{"kill", "container not running", nil},
		{"delete", "cannot delete container capsule-1 that is not stopped: running", nil},
		{"run", `runc run failed: unable to start container process: exec: "/bin/nope": stat /bin/nope: no such file or directory`, fs.ErrNotExist},
		{"run", `exec: "nope": executable file not found in $PATH`, fs.ErrNotExist},
		{"run", `unable to start container process: exec: "/bin/x": permission denied`, fs.ErrPermission},
		{"run", "container with id exists: capsule-1 does not exist", nil},
		{"run", "", nil},
	} {
		e := newRuntimeError("runc", tc.op, []string{"capsule-1"}, nil, tc.stderr)
		for _, class := range []error{errNoContainer, fs.ErrNotExist, fs.ErrPermission} {
			if got, want := errors.Is(e, class), class == tc.want; got != want {
				t.Errorf("%s %q: errors.Is(%v) = %v, want %v", tc.op, tc.stderr, class, got, want)
			}
		}
	}
}

// A runtime failure crosses from the monitor to the host as JSON and keeps
// its class and its message.
func TestRuntimeErrorRoundTrip(t *testing.T) {
	err := exec.Command("/bin/sh", "-c", "exit 1").Run()
	e := newRuntimeError("runc", "run", []string{"--detach", "c"}, err, "exec: \"/x\": stat /x: no such file or directory")
	if e.ExitCode != 1 || !errors.Is(e, fs.ErrNotExist) {
		t.Fatalf("exit code %d, class %v", e.ExitCode, e.class)
	}
	const msg = "runc run: exit status 1: exec: \"/x\": stat /x: no such file or directory"
	if e.Error() != msg {
		t.Fatalf("message %q", e.Error())
	}
	b, _ := json.Marshal(monitorStatus{Error: e.Error(), Runtime: e})
	var st monitorStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	got := st.startErr()
	if !errors.Is(got, fs.ErrNotExist) || got.Error() != msg {
		t.Fatalf("after the trip: %v", got)
	}
	// The init's exec error carries its errno, not text.
	st = monitorStatus{Error: "exec /bin/nope", Errno: int(syscall.ENOENT)}
	if got := st.startErr(); !errors.Is(got, fs.ErrNotExist) || got.Error() != "no such file or directory: exec /bin/nope" {
		t.Fatalf("init exec error: %v", got)
	}
	if got := (monitorStatus{Error: "monitor exited without a status: EOF"}).startErr(); errors.Is(got, fs.ErrNotExist) || errors.Is(got, fs.ErrPermission) {
		t.Fatalf("unclassified failure classified: %v", got)
	}
}

// The runtime wrapper's decisions against real runc: a delete refused for
// a live container, a kill of a gone one, the state of no container.
func TestRuntimeDecisions(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, e.spec("/bin/sleep", "100"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.b.Cleanup(ctx, h.Ref())
	c := lookupLive(e.b.stateDir(h.Ref().ID))
	rt, cid := c.st.runtime(), c.st.ContainerID
	if rs, err := rt.state(ctx, cid); err != nil || !statusAlive(rs.Status) {
		t.Fatalf("state: %+v %v", rs, err)
	}
	if err := rt.delete(ctx, cid, false); !errors.Is(err, errStillRunning) {
		t.Fatalf("delete of a running container: %v", err)
	}
	if ex, err := h.Terminate(ctx, sandbox.Force); err != nil || ex.Signal != syscall.SIGKILL {
		t.Fatalf("force: %+v %v", ex, err)
	}
	// The monitor deletes the runtime's container once the exit is
	// recorded; wait for that.
	deadline := time.Now().Add(30 * time.Second)
	for !fileExists(filepath.Join(c.stateDir, deletedName)) {
		if time.Now().After(deadline) {
			t.Fatal("the monitor never deleted the container")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := rt.state(ctx, cid); !errors.Is(err, errNoContainer) {
		t.Fatalf("state of a deleted container: %v", err)
	}
	if err := rt.kill(ctx, cid, syscall.SIGTERM, false); !errors.Is(err, errNotRunning) {
		t.Fatalf("kill of a deleted container: %v", err)
	}
	if err := rt.delete(ctx, cid, false); err != nil {
		t.Fatalf("delete of a deleted container: %v", err)
	}
	// And a signal after the exit is no error at all.
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal after exit: %v", err)
	}
}

// Without capsule-oci-init the runtime itself execs the process, and its
// words are the only report of a missing executable: the classifier turns
// them into fs.ErrNotExist, and nothing is left behind.
func TestSpawnErrorNotFoundNoInit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Init, o.NoInit = "", true })
	_, err := e.b.Start(context.Background(), e.spec("/bin/does-not-exist"))
	var se *sandbox.SpawnError
	if !errors.As(err, &se) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("want SpawnError/ErrNotExist, got %v", err)
	}
	if !strings.Contains(se.Error(), "does-not-exist") {
		t.Errorf("the runtime's report is lost: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(e.opts.Root, "containers"))
	bents, _ := os.ReadDir(filepath.Join(e.opts.Root, "bundles"))
	if len(ents)+len(bents) != 0 {
		t.Fatalf("leftovers: %d state dirs, %d bundles", len(ents), len(bents))
	}
}

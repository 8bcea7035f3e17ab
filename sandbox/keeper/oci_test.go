package keeper_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
	"github.com/capsule-host/capsule-host/sandbox/oci"
	"github.com/capsule-host/capsule-host/sandbox/oci/rootfs"
)

// ociConfig is a keeper embedding the OCI backend with real runc and a
// busybox profile (no user namespace, no init: the least that runs a
// container), its state under the keeper's directory. It skips loudly
// where runc, root or a static busybox is missing.
func ociConfig(t *testing.T, dir string) keeper.Config {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP LOUDLY: the keeper's OCI tests need root (CI runs them as root)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("SKIP LOUDLY: runc not installed (apt-get install runc)")
	}
	rfs, err := rootfs.Cached(rootfs.DefaultBusybox, filepath.Join(os.TempDir(), "capsule-test-cache"))
	if err != nil {
		t.Skipf("SKIP LOUDLY: busybox rootfs: %v (apt-get install busybox-static)", err)
	}
	return keeper.Config{Dir: dir, Name: "oci", OCI: &oci.Options{
		Root:     filepath.Join(dir, "oci"),
		Profiles: map[string]oci.Profile{"default": {Rootfs: rfs, Network: oci.NetworkNone, Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 256}}},
		NoInit:   true,
	}}
}

// TestKeeperKilledOCI: a container whose keeper died is killed by the
// next keeper (keeper-lost, SIGKILL), and its cleanup removes everything
// the OCI backend and runc left for it: the container's state directory,
// the runtime's, the bundle. Before the keeper recorded the backend's ID
// of a process, the first and the last leaked for every container of a
// dead keeper. With its monitor killed too (nobody deletes the runtime's
// container when the init dies), the cleanup deletes it.
func TestKeeperKilledOCI(t *testing.T) {
	for _, killMonitor := range []bool{false, true} {
		name := "keeper"
		if killMonitor {
			name = "keeper-and-monitor"
		}
		t.Run(name, func(t *testing.T) { testKeeperKilledOCI(t, killMonitor) })
	}
}

func testKeeperKilledOCI(t *testing.T, killMonitor bool) {
	dir := newDir(t)
	marker := filepath.Base(dir)
	cfg := ociConfig(t, dir)
	p, err := keeper.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, dir)
	ctx := ctxT(t, 90*time.Second)
	st := startUp(t, ctx, c, marker)
	ociRoot := cfg.OCI.Root
	if n := entries(t, filepath.Join(ociRoot, "containers")); n != 1 {
		t.Fatalf("%d container state directories while it runs, want 1", n)
	}
	c.Close()
	syscall.Kill(p.PID, syscall.SIGKILL)
	<-p.Done()
	if killMonitor {
		killMonitors(t, filepath.Join(ociRoot, "containers"))
	}

	if _, err := keeper.Start(cfg); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, dir)
	pollUntil(t, 30*time.Second, "the dead keeper's container gone", func() bool { return len(guests(marker)) == 0 })
	ins, err := c2.Inspect(ctx, st.Ref)
	if err != nil || ins.Phase != sandbox.PhaseExited || ins.Exit.Reason != keeper.ReasonKeeperLost || ins.Exit.Signal != syscall.SIGKILL {
		t.Fatalf("after the keeper's crash: %+v (exit %+v), %v", ins, ins.Exit, err)
	}
	cgs := cgroupDirs(t, filepath.Join(ociRoot, "containers"))
	// The container's monitor deletes the runtime's container once the
	// init is gone; until then the backend says it runs.
	pollUntil(t, 30*time.Second, "cleanup of the lost container", func() bool {
		err := c2.Cleanup(ctx, st.Ref)
		if err != nil && !errors.Is(err, sandbox.ErrRunning) {
			t.Fatalf("cleanup: %v", err)
		}
		return err == nil
	})
	for _, d := range []string{"containers", "runtime-runc", "bundles"} {
		if n := entries(t, filepath.Join(ociRoot, d)); n != 0 {
			t.Errorf("%s: %d entries left after the cleanup of a dead keeper's container", d, n)
		}
	}
	for _, d := range cgs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the container's cgroup %s is left: %v", d, err)
		}
	}
	if out, err := exec.Command("runc", "--root", filepath.Join(ociRoot, "runtime-runc"), "list", "-q").Output(); err != nil || len(out) != 0 {
		t.Errorf("runc list after cleanup: %q, %v", out, err)
	}
}

// TestKeeperStopAllOCIQuiesces: a keeper that stops all its containers
// exits only once their monitors are gone. A monitor outlives its
// container by a runc delete and two writes into the state directory;
// before the keeper waited for them, a test removing the state right
// after the keeper's exit raced those writes ("directory not empty", a
// CI failure of TestDurableRestartOCI).
func TestKeeperStopAllOCIQuiesces(t *testing.T) {
	dir := newDir(t)
	marker := filepath.Base(dir)
	cfg := ociConfig(t, dir)
	p, err := keeper.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, dir)
	ctx := ctxT(t, 90*time.Second)
	var refs []sandbox.Ref
	for i := 0; i < 3; i++ {
		refs = append(refs, startUp(t, ctx, c, marker).Ref)
	}
	containers := filepath.Join(cfg.OCI.Root, "containers")
	monitors := monitorsOf(t, containers)
	if len(monitors) != len(refs) {
		t.Fatalf("%d monitors recorded for %d containers", len(monitors), len(refs))
	}
	if err := c.Shutdown(ctx, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("the keeper did not exit after shutdown with stop_all")
	}
	for _, m := range monitors {
		if alive(m[0], uint64(m[1])) {
			t.Errorf("monitor %d still runs after its keeper stopped all and exited", m[0])
		}
	}
	if g := guests(marker); len(g) != 0 {
		t.Errorf("container processes left after stop_all: %v", g)
	}
}

// monitorsOf reads the monitor PID and start tick of every container
// under dir from its state.json.
func monitorsOf(t *testing.T, dir string) [][2]int {
	t.Helper()
	var out [][2]int
	ents, _ := os.ReadDir(dir)
	for _, de := range ents {
		b, err := os.ReadFile(filepath.Join(dir, de.Name(), "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			PID   int    `json:"monitor_pid"`
			Start uint64 `json:"monitor_start"`
		}
		if err := json.Unmarshal(b, &st); err != nil || st.PID <= 0 {
			t.Fatalf("state.json of %s: %v (%s)", de.Name(), err, b)
		}
		out = append(out, [2]int{st.PID, int(st.Start)})
	}
	return out
}

// startUp starts a container in the profile "default" that prints "up"
// and then sleeps, and waits for the "up".
func startUp(t *testing.T, ctx context.Context, c *keeper.Client, marker string) keeper.Status {
	t.Helper()
	ws := t.TempDir()
	sp := spec(marker, "/bin/sh", "-c", "echo up; while :; do sleep 1; done", marker)
	sp.Cwd, sp.Env = ws, []string{"PATH=/bin"}
	sp.Isolation = sandbox.IsolationSpec{Workspace: ws, Profile: "default"}
	st, err := c.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, c.Log(st.Ref, keeper.Stdout), 30*time.Second, func(b []byte) bool { return string(b) == "up\n" })
	return st
}

// entries counts what a directory holds (0 if it does not exist).
func entries(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return len(ents)
}

// killMonitors SIGKILLs the monitor of every container under dir (its PID
// and start time are in the container's state.json).
func killMonitors(t *testing.T, dir string) {
	t.Helper()
	for _, m := range monitorsOf(t, dir) {
		if alive(m[0], uint64(m[1])) {
			syscall.Kill(m[0], syscall.SIGKILL)
		}
		waitDead(t, m[0], uint64(m[1]), 10*time.Second)
	}
}

// cgroupDirs lists the cgroups the containers under dir recorded.
func cgroupDirs(t *testing.T, dir string) []string {
	t.Helper()
	var all []string
	ents, _ := os.ReadDir(dir)
	for _, de := range ents {
		var dirs []string
		b, err := os.ReadFile(filepath.Join(dir, de.Name(), "cgroups.json"))
		if err == nil {
			err = json.Unmarshal(b, &dirs)
		}
		if err != nil {
			t.Fatalf("cgroups.json of %s: %v", de.Name(), err)
		}
		all = append(all, dirs...)
	}
	if len(all) == 0 {
		t.Fatal("no container cgroup recorded")
	}
	return all
}

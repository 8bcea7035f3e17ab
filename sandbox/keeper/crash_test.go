package keeper_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// TestSocketChecks: unsafe paths are refused, a second keeper is refused
// naming the first one's PID, and a dead keeper's socket is ErrKeeperGone.
func TestSocketChecks(t *testing.T) {
	dir := newDir(t)
	p := startKeeper(t, dir)
	sock := filepath.Join(dir, keeper.SocketName)
	ctx := ctxT(t, 30*time.Second)
	unsafe := []struct {
		name       string
		path       string
		mode       os.FileMode
		uid        int
		undo       os.FileMode
		startToo   bool
		wantUnsafe bool
	}{
		{name: "world-writable dir", path: dir, mode: 0o777, uid: -1, undo: 0o700, startToo: true},
		{name: "group-writable dir", path: dir, mode: 0o770, uid: -1, undo: 0o700},
		{name: "world-writable socket", path: sock, mode: 0o666, uid: -1, undo: 0o600},
		{name: "socket of another owner", path: sock, mode: 0o600, uid: 65534, undo: 0o600},
		{name: "dir of another owner", path: dir, mode: 0o700, uid: 65534, undo: 0o700, startToo: true},
	}
	for _, u := range unsafe {
		t.Run(u.name, func(t *testing.T) {
			if u.uid >= 0 && os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			if err := os.Chmod(u.path, u.mode); err != nil {
				t.Fatal(err)
			}
			if u.uid >= 0 {
				os.Lchown(u.path, u.uid, -1)
			}
			defer func() {
				os.Lchown(u.path, os.Geteuid(), -1)
				os.Chmod(u.path, u.undo)
			}()
			if _, err := keeper.Dial(ctx, dir); !errors.Is(err, keeper.ErrUnsafePath) {
				t.Fatalf("Dial: %v, want ErrUnsafePath", err)
			}
			if u.startToo {
				if _, err := keeper.Start(keeper.Config{Dir: dir}); !errors.Is(err, keeper.ErrUnsafePath) {
					t.Fatalf("Start: %v, want ErrUnsafePath", err)
				}
			}
		})
	}
	_, err := keeper.Start(keeper.Config{Dir: dir})
	var le *keeper.LockedError
	if !errors.As(err, &le) || le.PID != p.PID || !errors.Is(err, keeper.ErrKeeperRunning) {
		t.Fatalf("second keeper: %v, want a LockedError naming PID %d", err, p.PID)
	}
	dial(t, dir) // the first keeper still serves
	syscall.Kill(p.PID, syscall.SIGKILL)
	<-p.Done()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the killed keeper's socket should be stale, not gone: %v", err)
	}
	start := time.Now()
	_, err = keeper.Dial(ctx, dir)
	if !errors.Is(err, keeper.ErrKeeperGone) || !errors.Is(err, sandbox.ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("Dial of a stale socket: %v, want ErrKeeperGone", err)
	}
	t.Logf("stale socket refused in %v: %v", time.Since(start), err)
}

type victim struct {
	name string
	argv []string
	// dies: the root dies of SIGPIPE when the keeper does (it writes).
	dies bool
	// lingers: the marker of a process that outlives the keeper until
	// the next one starts ("" for none but the root).
	lingers string
	ref     sandbox.Ref
	pid     int
	start   uint64
	// groups: the root's tracking cgroups (cgroups mode only).
	groups []string
	// swept: another capsule-host process on the machine swept the dead
	// keeper's cgroups before the next keeper started (see
	// checkLingering), so the next keeper found the root dead.
	swept bool
}

// TestKeeperKilled: what a SIGKILL of the keeper does to its processes,
// and how the next keeper makes it deterministic: with cgroups, and
// without, where only the recorded session identifies the orphans.
func TestKeeperKilled(t *testing.T) {
	t.Run("cgroups", func(t *testing.T) {
		testKeeperKilled(t, false, func(m string) []*victim {
			return []*victim{
				{name: "chatty", argv: counterArgv(m), dies: true},
				{name: "silent", argv: sleeperArgv(m), lingers: m + "-sleep"},
				// Its child leaves the session: only the cgroup sweep finds it.
				{name: "escaped", lingers: m + "-root-esc", argv: []string{"/usr/bin/bash", "-c",
					`setsid /usr/bin/bash -c 'exec -a "$0" /usr/bin/sleep 1000' "$0-esc" & exec -a "$0" /usr/bin/sleep 1000`, m + "-root"}},
			}
		})
	})
	t.Run("no-cgroups", func(t *testing.T) {
		testKeeperKilled(t, true, func(m string) []*victim {
			return []*victim{
				{name: "chatty", argv: counterArgv(m), dies: true},
				{name: "silent", argv: sleeperArgv(m), lingers: m + "-sleep"},
				// The root dies of SIGPIPE; its silent child stays in the session.
				{name: "headless", dies: true, lingers: m + "-bg", argv: []string{"/usr/bin/bash", "-c",
					`(exec -a "$0-bg" /usr/bin/sleep 1000) & while :; do echo x; /usr/bin/sleep 0.05; done`, m}},
			}
		})
	})
}

func testKeeperKilled(t *testing.T, noCgroups bool, victims func(marker string) []*victim) {
	dir := newDir(t)
	marker := filepath.Base(dir)
	cfg := keeper.Config{Dir: dir, NoCgroups: noCgroups}
	p, err := keeper.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, dir)
	ctx := ctxT(t, 60*time.Second)
	// Settled before the crash: its record and output must survive.
	done, err := c.Start(ctx, spec(marker, "/bin/sh", "-c", "echo bye; exit 3", marker))
	if err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx, done.Ref); err != nil || x.Code != 3 {
		t.Fatalf("exit before the crash: %+v, %v", x, err)
	}
	vs := victims(marker)
	for _, v := range vs {
		st, err := c.Start(ctx, spec(marker, v.argv...))
		if err != nil {
			t.Fatal(err)
		}
		v.ref, v.pid, v.start = st.Ref, st.PID, procfs.StartTime(st.PID)
		if !noCgroups {
			v.groups = trackingGroups(t, st.PID)
		}
		if v.lingers != "" {
			pollUntil(t, 10*time.Second, v.lingers, func() bool { return len(withMarker(v.lingers)) == 1 })
		}
	}
	waitFor(t, c.Log(vs[0].ref, keeper.Stdout), 30*time.Second, func(b []byte) bool { return len(b) > 0 })
	c.Close()

	syscall.Kill(p.PID, syscall.SIGKILL)
	<-p.Done()
	// A writer dies of SIGPIPE at its next write; silent processes linger
	// without an owner until the next keeper.
	for _, v := range vs {
		if v.dies {
			waitDead(t, v.pid, v.start, 10*time.Second)
		}
		if v.lingers != "" {
			checkLingering(t, v)
		}
	}
	if _, err := keeper.Dial(ctx, dir); !errors.Is(err, keeper.ErrKeeperGone) {
		t.Fatalf("Dial after the crash: %v", err)
	}

	if _, err := keeper.Start(cfg); err != nil {
		t.Fatal(err)
	}
	// Killed before it served; dying takes the kernel a moment.
	pollUntil(t, 10*time.Second, "the dead keeper's processes gone", func() bool { return len(guests(marker)) == 0 })
	checkLost(t, dial(t, dir), dir, vs, done.Ref)
}

// checkLingering: a silent process outlives its keeper's SIGKILL, unless
// its cgroups were swept. A capsule-host process that starts a local
// backend kills and removes the cgroups of dead hosts under its own
// (sweepStale): the next keeper of the directory (the keeper's own cgroup
// is per directory) for the v2 leaves, and for v1 limit leaves, under
// the starter's cgroup, any process there, under go test another
// package's binary at any moment: that is the product's rule (a dead
// keeper's trees do not outlive it for long), not a failure. What must not happen
// is the process dying with the keeper while its cgroups stay: that would
// be the keeper's death reaching it. If the sweep comes after this check
// and before the next keeper's kill, the next keeper finds the root dead
// and records it as died unseen: checkLost accepts either record for a
// victim with cgroups.
func checkLingering(t *testing.T, v *victim) {
	t.Helper()
	if len(withMarker(v.lingers)) == 1 {
		return
	}
	if len(v.groups) == 0 {
		t.Fatalf("%s: %s should outlive the keeper until the next one starts", v.name, v.lingers)
	}
	pollUntil(t, 10*time.Second, v.name+": its cgroups removed by a sweep (it died with them kept: the keeper's death reached it)",
		func() bool { return groupsGone(v.groups) })
	t.Logf("%s: another capsule-host process swept the dead keeper's cgroups first (%v)", v.name, v.groups)
	v.swept = true
}

// trackingGroups lists the cgroup directories, in every hierarchy, that
// the local backend made for the tree rooted at pid.
func trackingGroups(t *testing.T, pid int) []string {
	t.Helper()
	mounts, err := cgroups.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range cgroups.ProcDirs(mounts, strconv.Itoa(pid), "") {
		if strings.Contains(d, "/"+cgroups.Parent+"/") {
			out = append(out, d)
		}
	}
	return out
}

func groupsGone(dirs []string) bool {
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			return false
		}
	}
	return true
}

func checkLost(t *testing.T, c *keeper.Client, dir string, vs []*victim, done sandbox.Ref) {
	ctx := ctxT(t, 30*time.Second)
	for _, v := range vs {
		wantSig := syscall.SIGKILL // killed by the next keeper
		if v.dies || v.swept {
			wantSig = 0 // died unseen: Code -1
		}
		st, err := c.Inspect(ctx, v.ref)
		if err == nil && wantSig == syscall.SIGKILL && st.Exit.Signal == 0 && len(v.groups) > 0 {
			// Swept by another host after checkLingering (see there).
			t.Logf("%s: swept before the next keeper started", v.name)
			wantSig = 0
		}
		if err != nil || st.Phase != sandbox.PhaseExited || st.Exit.Reason != keeper.ReasonKeeperLost || st.Exit.Signal != wantSig {
			t.Fatalf("%s after the crash: %+v (exit %+v), %v", v.name, st, st.Exit, err)
		}
		if data := readAll(t, c.Log(v.ref, keeper.Stdout), 0); len(data) != 0 {
			t.Fatalf("%s: a lost process's log should be empty, got %q", v.name, data)
		}
		if err := c.Cleanup(ctx, v.ref); err != nil {
			t.Fatal(err)
		}
	}
	x, err := c.Wait(ctx, done)
	if err != nil || x.Code != 3 || x.Reason != keeper.ReasonExited {
		t.Fatalf("the process that settled before the crash: %+v, %v", x, err)
	}
	if data := readAll(t, c.Log(done, keeper.Stdout), 0); string(data) != "bye\n" {
		t.Fatalf("its output after the crash: %q", data)
	}
	if err := c.Cleanup(ctx, done); err != nil {
		t.Fatal(err)
	}
	if list, err := c.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after cleanup: %v, %v", list, err)
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "procs")); err != nil || len(ents) != 0 {
		t.Fatalf("process directories after cleanup: %v, %v", ents, err)
	}
}

// TestExitReportedOnlyOnceDurable is the durability rule of the group
// commit (RFC §16): a keeper that dies after renaming an exit record and
// before the flush that makes it durable (the before-exit-flush crash
// point) has told nobody of that exit, so a wait in flight fails instead
// of answering; the next keeper serves the record the rename left (a
// process crash keeps the page cache), with the real exit code.
func TestExitReportedOnlyOnceDurable(t *testing.T) {
	dir := newDir(t)
	marker := filepath.Base(dir)
	t.Setenv("CAPSULE_KEEPER_TEST_CRASH", "before-exit-flush")
	p, err := keeper.Start(keeper.Config{Dir: dir})
	os.Unsetenv("CAPSULE_KEEPER_TEST_CRASH") // the next keeper (and the sweep) flush normally
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, dir)
	ctx := ctxT(t, 60*time.Second)
	sp := spec(marker, "/bin/sh", "-c", "read x; exit 5", marker)
	sp.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen}
	st, err := c.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		x, err := c.Wait(ctx, st.Ref)
		if err == nil {
			waited <- fmt.Errorf("exit %+v reported before its record was durable", x)
			return
		}
		waited <- nil
	}()
	if _, err := c.WriteStdin(ctx, st.Ref, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("the keeper did not reach its crash point")
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "procs", st.Ref.ID, "exit.json")); err != nil {
		t.Fatalf("the renamed record: %v", err)
	}
	startKeeper(t, dir)
	c2 := dial(t, dir)
	x, err := c2.Wait(ctx, st.Ref)
	if err != nil || x.Code != 5 || x.Reason != keeper.ReasonExited {
		t.Fatalf("after the crash: %+v, %v; want code 5, %s", x, err, keeper.ReasonExited)
	}
	if err := c2.Cleanup(ctx, st.Ref); err != nil {
		t.Fatal(err)
	}
}

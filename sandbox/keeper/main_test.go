package keeper_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/pidlock"
	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

func TestMain(m *testing.M) {
	reexec.Register(clientRole, clientMain)
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// newDir makes a keeper directory whose name is the marker every process
// of the test carries in its argv, and registers the final sweep: stop
// whatever keeper serves it (starting one if it died, which kills what
// the dead one left), then check that no process of the test is left.
func newDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "keeper-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o700)
	t.Cleanup(func() {
		stopDir(t, dir)
		waitNoLeftovers(t, filepath.Base(dir))
		if t.Failed() {
			logTail(t, filepath.Join(dir, keeper.LogName))
		}
		os.RemoveAll(dir)
	})
	return dir
}

// logTail shows the end of a failed test's keeper log, which goes with
// its directory: on a CI machine it is the only trace of what the keeper
// saw.
func logTail(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	t.Logf("the end of %s:\n%s", path, b)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startKeeper starts a keeper on dir with short frame timeouts.
func startKeeper(t testing.TB, dir string) *keeper.Process {
	t.Helper()
	p, err := keeper.Start(keeper.Config{Dir: dir, FrameTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("keeper.Start: %v", err)
	}
	return p
}

func dial(t testing.TB, dir string) *keeper.Client {
	t.Helper()
	c, err := keeper.Dial(ctxT(t, 10*time.Second), dir)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stopDir shuts down the keeper of dir with stop_all and waits for it to
// exit. A dead keeper is replaced first: the new one kills the orphans.
// A keeper that is already going away is waited for (its PID is in the
// lock file), then replaced the same way.
func stopDir(t *testing.T, dir string) {
	ctx := ctxT(t, 60*time.Second)
	for attempt := 0; attempt < 5; attempt++ {
		c, err := keeper.Dial(ctx, dir)
		if err == nil {
			pid := c.KeeperPID()
			err = c.Shutdown(ctx, true)
			c.Close()
			if err == nil {
				waitDead(t, pid, 0, 30*time.Second)
				return
			}
		}
		if !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("final shutdown: %v", err)
			return
		}
		if b, rerr := os.ReadFile(filepath.Join(dir, keeper.LockName)); rerr == nil {
			if pid, _ := pidlock.Holder(b); pid > 0 {
				waitDead(t, pid, 0, 30*time.Second)
			}
		}
		if _, err := keeper.Start(keeper.Config{Dir: dir}); err != nil && !errors.Is(err, keeper.ErrKeeperRunning) {
			t.Errorf("sweep keeper: %v", err)
			return
		}
	}
	t.Errorf("keeper of %s could not be stopped", dir)
}

// alive reports whether pid runs (not gone, not a zombie), and, with a
// start tick, whether it is still that process.
func alive(pid int, start uint64) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && !st.Zombie() && (start == 0 || st.Start == start)
}

func waitDead(t testing.TB, pid int, start uint64, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for alive(pid, start) {
		if time.Now().After(deadline) {
			t.Errorf("pid %d still alive after %v", pid, d)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// guests lists the live processes of a test other than its keepers.
func guests(marker string) []int {
	var out []int
	for _, pid := range withMarker(marker) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if !bytes.HasPrefix(b, []byte(keeper.RoleName+"\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// withMarker lists live processes whose argv contains marker.
func withMarker(marker string) []int {
	pids, _ := procfs.PIDs()
	var out []int
	for _, pid := range pids {
		if pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		if alive(pid, 0) {
			out = append(out, pid)
		}
	}
	return out
}

func waitNoLeftovers(t *testing.T, marker string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := withMarker(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, pid := range left {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				desc = append(desc, strconv.Itoa(pid)+": "+strings.ReplaceAll(string(b), "\x00", " "))
			}
			t.Errorf("processes left behind: %s", strings.Join(desc, "; "))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spec is a process spec with every bound given; marker lands in argv.
func spec(marker string, argv ...string) sandbox.ProcessSpec {
	return sandbox.ProcessSpec{
		Argv:   argv,
		Cwd:    "/tmp",
		Env:    []string{"PATH=/usr/bin:/bin"},
		Stdin:  sandbox.StdinSpec{Mode: sandbox.StdinClosed},
		Output: sandbox.OutputSpec{RingBytes: 64 << 10, SpillBytes: 1 << 20, Overflow: sandbox.DropOldest, SpillDir: "/tmp"},
		Grace:  time.Second,
		Drain:  time.Second,
		Label:  marker,
	}
}

// counterArgv prints 0, 1, 2, ... one line every 50 ms (one write per line).
func counterArgv(marker string) []string {
	return []string{"/usr/bin/perl", "-e", `$|=1; for ($i=0;;$i++) { print "$i\n"; select(undef,undef,undef,0.05) }`, marker}
}

// sleeperArgv is a silent process: it never writes.
func sleeperArgv(marker string) []string {
	return []string{"/usr/bin/bash", "-c", `exec -a "$0" /usr/bin/sleep 1000`, marker + "-sleep"}
}

// readAll reads a log from off to its current end.
func readAll(t testing.TB, l keeper.Log, off int64) []byte {
	t.Helper()
	var out []byte
	for end := l.End(); off < end; {
		c, err := l.ReadFrom(off, 1<<20)
		if err != nil {
			t.Fatalf("ReadFrom(%d): %v", off, err)
		}
		if c.Dropped > 0 {
			t.Fatalf("ReadFrom(%d): %d bytes dropped", off, c.Dropped)
		}
		out = append(out, c.Data...)
		off = c.Next
	}
	return out
}

// waitFor follows l (Changed, never polling) until cond holds on what was
// read from 0.
func waitFor(t testing.TB, l keeper.Log, d time.Duration, cond func([]byte) bool) []byte {
	t.Helper()
	deadline := time.After(d)
	var data []byte
	for {
		ch := l.Changed()
		data = append(data, readAll(t, l, int64(len(data)))...)
		if cond(data) {
			return data
		}
		if l.Closed() && int64(len(data)) == l.End() {
			t.Fatalf("stream closed before the condition held; got %q", data)
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("condition not met within %v; got %q", d, data)
		}
	}
}

// counters parses counter output and checks it is 0, 1, 2, ... with no
// gap and no duplicate; it returns how many lines it saw.
func checkCounters(t testing.TB, data []byte, first int) int {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, l := range lines {
		n, err := strconv.Atoi(l)
		if err != nil || n != first+i {
			t.Fatalf("line %d is %q, want %d (gap, duplicate or torn line)", i, l, first+i)
		}
	}
	return len(lines)
}

//go:build linux

package procfs

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPidfd: OpenPidfd pins a live process and refuses a wrong start
// time; AwaitPidfd sees an exit (a zombie counts), and with a bound it
// returns false for a process still running, at once for a bound of 0.
func TestPidfd(t *testing.T) {
	start := func(arg string) *exec.Cmd {
		t.Helper()
		c := exec.Command("sleep", arg)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	long := start("60")
	if _, ok := OpenPidfd(long.Process.Pid, StartTime(long.Process.Pid)+1); ok {
		t.Fatal("a pidfd was opened on a start time that is not the process's")
	}
	fd, ok := OpenPidfd(long.Process.Pid, StartTime(long.Process.Pid))
	if !ok {
		t.Fatal("no pidfd on a live process")
	}
	defer unix.Close(fd)
	for _, bound := range []time.Duration{0, 50 * time.Millisecond} {
		t0 := time.Now()
		if AwaitPidfd(fd, bound) {
			t.Fatalf("bound %v: a running process reported as exited", bound)
		}
		if el := time.Since(t0); el < bound {
			t.Fatalf("bound %v: returned after %v", bound, el)
		}
	}
	long.Process.Kill() // a zombie until the cleanup's Wait: exited all the same
	if !AwaitPidfd(fd, 30*time.Second) {
		t.Fatal("a killed process not seen as exited within 30 s")
	}
	if !AwaitPidfd(fd, -1) {
		t.Fatal("unbounded wait on an exited process did not return true")
	}
}

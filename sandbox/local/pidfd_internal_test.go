package local

import (
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// forkSleep starts a bare `sleep` child with a pidfd (no session, no
// cgroup: not one of the reaper's trees) and reaps it at the end.
func forkSleep(t *testing.T) (pid, pidfd int) {
	t.Helper()
	pidfd = -1
	pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "1000"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{PidFD: &pidfd},
	})
	if err != nil {
		t.Fatal(err)
	}
	if pidfd < 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		reapPID(pid)
		t.Skip("no CLONE_PIDFD")
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGKILL)
		reapPID(pid)
	})
	return pid, pidfd
}

func reapPID(pid int) {
	var si unix.Siginfo
	for unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED, nil) == unix.EINTR {
	}
}

// waitExitAsync runs waitExit and hands back what it returned.
func waitExitAsync(d *pidFD) <-chan [3]any {
	ch := make(chan [3]any, 1)
	go func() {
		si, seen, err := d.waitExit()
		ch <- [3]any{si, seen, err}
	}()
	return ch
}

// waitExit parks in the poller and wakes for the exit; the root stays
// a zombie (a second peek still sees it) until it is reaped.
func TestWaitExitWakesAndKeepsZombie(t *testing.T) {
	pid, fd := forkSleep(t)
	d := newPidFD(fd)
	defer d.close()
	ch := waitExitAsync(d)
	d.signal(syscall.SIGKILL)
	var r [3]any
	select {
	case r = <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("waitExit did not wake for the exit")
	}
	si, seen, err := r[0].(siginfoChld), r[1].(bool), r[2]
	if !seen || err != nil || si.Pid != int32(pid) || syscall.Signal(si.Status) != syscall.SIGKILL {
		t.Fatalf("waitExit: %+v seen=%v err=%v, want pid %d killed by SIGKILL", si, seen, err, pid)
	}
	var again siginfoChld
	d.rc.Control(func(f uintptr) { seen, _ = peekExit(int(f), &again) })
	if !seen {
		t.Fatal("the root was reaped by waitExit; it must stay a zombie")
	}
}

// A root already gone before the wait is seen at once, not waited for.
func TestWaitExitAlreadyExited(t *testing.T) {
	pid, fd := forkSleep(t)
	d := newPidFD(fd)
	defer d.close()
	syscall.Kill(pid, syscall.SIGKILL)
	var si unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waitExitAsync(d):
		if !r[1].(bool) {
			t.Fatalf("waitExit on a zombie: %v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waitExit waited for a root that had already exited")
	}
}

// Without a pollable descriptor waitExit says so at once (seen false,
// no error), so rootExit falls back to the blocking wait instead of
// hanging.
func TestWaitExitNotPollable(t *testing.T) {
	_, fd := forkSleep(t)
	f := os.NewFile(uintptr(fd), "pidfd") // blocking: not in the poller
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	d := &pidFD{f: f, rc: rc}
	defer d.close()
	select {
	case r := <-waitExitAsync(d):
		if r[1].(bool) || r[2] != nil {
			t.Fatalf("not pollable: %v, want seen=false and no error", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waitExit hung on a descriptor the poller cannot wait on")
	}
}

// Once closed, the pidfd signals nothing: its number may already name
// another file, and signalTree must never reach through it. (A SIGKILL
// that got through would be pending before the SIGTERM sent next and
// would be the exit status.)
func TestPidFDSignalAfterClose(t *testing.T) {
	pid, fd := forkSleep(t)
	d := newPidFD(fd)
	d.close()
	d.signal(syscall.SIGKILL)
	syscall.Kill(pid, syscall.SIGTERM)
	var si siginfoChld
	if err := unix.Waitid(unix.P_PID, pid, (*unix.Siginfo)(unsafe.Pointer(&si)), unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if got := syscall.Signal(si.Status); got != syscall.SIGTERM {
		t.Fatalf("exit by %v, want SIGTERM: the closed pidfd signalled its process", got)
	}
}

package local

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pidFD is the root's pidfd. One *os.File owns the descriptor: the
// runtime's poller waits on it (waitExit), signals go through it
// (signal), and close, by reapRoot under sigMu once the root is reaped,
// is its only close. Every use goes through the RawConn, which holds a
// reference on the descriptor for the call, so a close can never land
// under a pidfd_send_signal and the number cannot be reused under one.
type pidFD struct {
	f  *os.File
	rc syscall.RawConn
}

// newPidFD takes ownership of a CLONE_PIDFD descriptor (nil for -1). It
// is made non-blocking so os.NewFile registers it with the poller; a
// waitid on it then never blocks, which is why the blocking waits
// (waitRoot) go by PID.
func newPidFD(fd int) *pidFD {
	if fd < 0 {
		return nil
	}
	// On failure the file is not pollable: waitExit reports that and
	// rootExit falls back to the blocking wait.
	_ = unix.SetNonblock(fd, true)
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &pidFD{f: f, rc: rc}
}

// signal sends sig through the pidfd (nothing once it is closed).
func (d *pidFD) signal(sig syscall.Signal) {
	d.rc.Control(func(fd uintptr) { _ = unix.PidfdSendSignal(int(fd), sig, nil, 0) })
}

func (d *pidFD) close() { d.f.Close() }

// lagBound bounds waiting, off the poller, for waitid to list a zombie
// the pidfd already reports (see waitExit); past it the caller falls back
// to the blocking wait, which the root's exit then ends at once.
const lagBound = 200 * time.Millisecond

// waitExit parks in the runtime's poller (no OS thread) until the root
// has exited, and leaves it a zombie. seen is false, with a nil error,
// when the poller could not do it (the descriptor is not pollable, or
// waitid lagged past lagBound): the caller then waits blocking.
//
// No wake-up is lost. The poller is edge-triggered, so returning to it
// is safe only while an edge is still to come. Whenever waitid does not
// list the zombie, a zero-timeout poll(2) asks the pidfd's level: not
// readable means the exit (and its wake-up) is still ahead, so back to
// the poller; readable means the wake-up may already be spent, so the
// goroutine retries waitid itself with a short backoff instead (a
// sleeping goroutine costs no thread either).
func (d *pidFD) waitExit() (si siginfoChld, seen bool, err error) {
	lagging := false
	rerr := d.rc.Read(func(fd uintptr) bool {
		seen, err = peekExit(int(fd), &si)
		if seen || err != nil {
			return true
		}
		lagging = readableNow(int(fd))
		return lagging
	})
	if seen || err != nil || rerr != nil || !lagging {
		return si, seen, err
	}
	delay := 20 * time.Microsecond
	for deadline := time.Now().Add(lagBound); time.Now().Before(deadline); delay = min(2*delay, 2*time.Millisecond) {
		time.Sleep(delay)
		if cerr := d.rc.Control(func(fd uintptr) { seen, err = peekExit(int(fd), &si) }); cerr != nil {
			return si, false, nil
		}
		if seen || err != nil {
			return si, seen, err
		}
	}
	return si, false, nil
}

// peekExit is one waitid that neither blocks nor reaps: seen when the
// root is a zombie (si filled in).
func peekExit(pidfd int, si *siginfoChld) (bool, error) {
	for {
		*si = siginfoChld{}
		err := unix.Waitid(unix.P_PIDFD, pidfd, (*unix.Siginfo)(unsafe.Pointer(si)), unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		return err == nil && si.Pid != 0, err
	}
}

// readableNow reports a descriptor's read readiness at this instant (a
// level, not an edge). Unsure (poll failed) counts as readable: the
// caller then never returns to the poller on a guess.
func readableNow(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || (n > 0 && fds[0].Revents != 0)
	}
}

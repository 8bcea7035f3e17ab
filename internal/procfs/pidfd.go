package procfs

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// OpenPidfd opens a pidfd on pid and checks, after opening, that it is
// still the process that started at start (0: unchecked), so a reused pid
// is never waited on or signalled. ok is false when the process is gone
// or is another one; the caller then has nothing to close.
func OpenPidfd(pid int, start uint64) (fd int, ok bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, false
	}
	if start != 0 && StartTime(pid) != start {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}

// AwaitPidfd waits until the pidfd's process has exited (a zombie counts),
// for at most bound (negative: no bound). It reports whether it did.
func AwaitPidfd(fd int, bound time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	end := time.Now().Add(bound)
	for {
		ms := -1
		if bound >= 0 {
			// Rounded up, so that the wait is never shorter than bound.
			ms = max(0, int((time.Until(end)+time.Millisecond-1)/time.Millisecond))
		}
		n, err := unix.Poll(fds, ms)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false
		case n > 0:
			return true
		case ms == 0:
			return false
		}
	}
}

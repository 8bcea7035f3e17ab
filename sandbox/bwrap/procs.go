package bwrap

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
)

// signalDescendants sends sig to every descendant of root (not root
// itself: bwrap's outer process). Everything in the sandbox descends from
// it, whatever sessions or groups it made, because orphans inside a pid
// namespace are re-parented to its init, bwrap's child. Each signal goes
// through a pidfd opened after the scan and checked against the scanned
// start time, so a reused pid is never hit.
func signalDescendants(root int, sig syscall.Signal) error {
	if root <= 0 {
		return fmt.Errorf("bwrap: no process to signal: %w", sandbox.ErrNotFound)
	}
	pids, err := procfs.PIDs()
	if err != nil {
		return fmt.Errorf("bwrap: scan /proc: %w: %w", sandbox.ErrUnavailable, err)
	}
	children := map[int][]int{}
	starts := map[int]uint64{}
	for _, pid := range pids {
		st, err := procfs.ReadStat(pid)
		if err != nil {
			continue
		}
		children[st.PPID] = append(children[st.PPID], pid)
		starts[pid] = st.Start
	}
	var errs []error
	queue := append([]int(nil), children[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		queue = append(queue, children[pid]...)
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.Start == starts[pid] {
			if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, err)
			}
		}
		unix.Close(fd)
	}
	if len(errs) > 0 {
		return fmt.Errorf("bwrap: signal %v: %w", sig, errors.Join(errs...))
	}
	return nil
}

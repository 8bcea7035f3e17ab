package bwrap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
)

// signalDescendants sends sig to every descendant of root (not root
// itself: bwrap's outer process). Everything in the sandbox descends from
// it, whatever sessions or groups it made, because orphans inside a pid
// namespace are re-parented to its init, bwrap's child. Each signal goes
// through a pidfd opened after the process's start time was read and
// checked against it again, so a reused pid is never hit.
//
// The tree is walked through /proc/<pid>/task/<tid>/children, which costs
// a few reads per descendant; only a kernel without CONFIG_PROC_CHILDREN
// scans every /proc/<pid>/stat. The scan per signal made stopping many
// sandboxed processes quadratic: 500 stopped at once read /proc 500 times
// over (issue 16).
func signalDescendants(root int, sig syscall.Signal) error {
	if root <= 0 {
		return fmt.Errorf("bwrap: no process to signal: %w", sandbox.ErrNotFound)
	}
	kids := childrenOf
	if _, err := childrenOf(root); err != nil {
		if kids, err = scanChildren(); err != nil {
			return fmt.Errorf("bwrap: scan /proc: %w: %w", sandbox.ErrUnavailable, err)
		}
	}
	queue, _ := kids(root)
	var errs []error
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		st, err := procfs.ReadStat(pid)
		if err != nil {
			continue // gone
		}
		more, _ := kids(pid) // before the signal: an orphan moves to the namespace's init, walked already
		queue = append(queue, more...)
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if again, err := procfs.ReadStat(pid); err == nil && again.Start == st.Start {
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

// childrenOf lists pid's children from every thread's children file; an
// error means the files are not there (the process is gone, or the kernel
// lacks CONFIG_PROC_CHILDREN).
func childrenOf(pid int) ([]int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range tids {
		b, err := os.ReadFile(dir + t.Name() + "/children")
		if err != nil {
			return nil, err
		}
		for _, f := range bytes.Fields(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// scanChildren is childrenOf from one scan of every /proc/<pid>/stat.
func scanChildren() (func(int) ([]int, error), error) {
	pids, err := procfs.PIDs()
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, pid := range pids {
		if st, err := procfs.ReadStat(pid); err == nil {
			children[st.PPID] = append(children[st.PPID], pid)
		}
	}
	return func(pid int) ([]int, error) { return children[pid], nil }, nil
}

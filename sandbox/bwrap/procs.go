package bwrap

import (
	"errors"
	"fmt"
	"syscall"
	"time"

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
// bwrap's child is pid 1 of the sandbox's namespace, and the kernel drops
// a signal to a namespace's init that has no handler for it. So a signal
// sent while bwrap is still setting up (nothing below its init yet, or
// nothing at all) would reach no one, and a graceful stop right after a
// start would wait out its whole grace. Until a process below the init
// has been signalled, the walk is repeated every millisecond, until done
// closes (the sandbox ended) or startBound passes.
//
// The tree is walked through /proc/<pid>/task/<tid>/children, which costs
// a few reads per descendant; only a kernel without CONFIG_PROC_CHILDREN
// scans every /proc/<pid>/stat. The scan per signal made stopping many
// sandboxed processes quadratic: 500 stopped at once read /proc 500 times
// over (issue 16).
func signalDescendants(root int, sig syscall.Signal, done <-chan struct{}) error {
	if root <= 0 {
		return fmt.Errorf("bwrap: no process to signal: %w", sandbox.ErrNotFound)
	}
	deadline := time.Now().Add(startBound)
	for {
		reached, err := signalTree(root, sig)
		if reached || err != nil {
			return err
		}
		select {
		case <-done:
			return nil
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bwrap: signal %v: the sandbox's program had not started within %v: %w", sig, startBound, sandbox.ErrUnavailable)
		}
		time.Sleep(time.Millisecond)
	}
}

// startBound bounds how long a signal waits for bwrap's set-up (a few ms;
// seconds only on a machine that is far behind).
const startBound = 10 * time.Second

// signalTree is one walk of signalDescendants; reached says whether a
// process below the namespace's init was signalled.
func signalTree(root int, sig syscall.Signal) (reached bool, _ error) {
	kids := procfs.Children
	if _, err := procfs.Children(root); err != nil {
		if kids, err = scanChildren(); err != nil {
			return false, fmt.Errorf("bwrap: scan /proc: %w: %w", sandbox.ErrUnavailable, err)
		}
	}
	type node struct{ pid, depth int }
	var queue []node
	first, _ := kids(root)
	for _, pid := range first {
		queue = append(queue, node{pid, 1})
	}
	var errs []error
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		st, err := procfs.ReadStat(n.pid)
		if err != nil {
			continue // gone
		}
		more, _ := kids(n.pid) // before the signal: an orphan moves to the namespace's init, walked already
		for _, pid := range more {
			queue = append(queue, node{pid, n.depth + 1})
		}
		fd, ok := procfs.OpenPidfd(n.pid, st.Start)
		if !ok {
			continue
		}
		if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, err)
		} else if err == nil && n.depth > 1 {
			reached = true
		}
		unix.Close(fd)
	}
	if len(errs) > 0 {
		return reached, fmt.Errorf("bwrap: signal %v: %w", sig, errors.Join(errs...))
	}
	return reached, nil
}

// scanChildren is procfs.Children from one scan of every /proc/<pid>/stat.
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

package bwrap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox"
)

type stat struct {
	ppid  int
	start uint64
}

func readStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return stat{ppid: ppid, start: start}, true
}

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
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("bwrap: scan /proc: %w: %w", sandbox.ErrUnavailable, err)
	}
	children := map[int][]int{}
	starts := map[int]uint64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if !ok {
			continue
		}
		children[st.ppid] = append(children[st.ppid], pid)
		starts[pid] = st.start
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
		if st, ok := readStat(pid); ok && st.start == starts[pid] {
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

package local

import (
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

// Signalling a tree: the process group, the root's pidfd, and every member
// of the cgroup, or without a cgroup every process of the root's session.

// signalTree sends sig to the process group (safe: the root is not reaped,
// so PGID = root PID cannot be reused) and to every member of the cgroup,
// which catches descendants that left the group or the session. Caller
// holds sigMu and has checked !reaped.
func (p *proc) signalTree(sig syscall.Signal) {
	if p.reaped {
		return
	}
	_ = unix.Kill(-p.pid, sig)
	if p.pidfd != nil {
		p.pidfd.signal(sig)
	}
	if p.group != nil && p.group.Tracking() {
		if sig == syscall.SIGKILL && p.group.V2Dir != "" {
			p.cgKilled = true
			_ = os.WriteFile(filepath.Join(p.group.V2Dir, "cgroup.kill"), []byte("1"), 0)
		} else {
			_ = p.group.Signal(sig)
		}
	} else {
		p.killSession(sig)
	}
}

// killSession is the no-cgroup fallback: signal every process in the
// root's session or group (a pidfd guards against reuse between the scan
// and the signal). A descendant that called setsid itself is out of reach
// here; cgroups are what catch it.
func (p *proc) killSession(sig syscall.Signal) {
	pids, err := procfs.PIDs()
	if err != nil {
		return
	}
	for _, pid := range pids {
		if pid == p.pid {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil || (st.SID != p.pid && st.PGID != p.pid) {
			continue
		}
		if fd, ok := procfs.OpenPidfd(pid, st.Start); ok {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
			unix.Close(fd)
		}
	}
}

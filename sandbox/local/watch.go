package local

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The root watcher (Options.Multiplex): the reaper's SIGCHLD goroutine
// notices every watched root's exit, so a live process holds neither a
// pidfd nor a goroutine parked on one. At every SIGCHLD (and at the
// reaper's one-second tick, should a signal ever be coalesced away) it
// asks each watched root, by PID, whether it is a zombie, with a waitid
// that neither blocks nor reaps: the root is still reaped last, by its
// settle sequence, so its PID stays pinned as before. That is one cheap
// syscall per live root and SIGCHLD (a few hundred microseconds at 500
// roots); a wait(-1) would be cheaper but would reap the root at once,
// unpinning its PGID while survivors may still be signalled, and would
// steal the statuses of children that os/exec waits for.

// rootEvent is what the watcher saw of a root: its exit, or the error of
// asking (the settle sequence then records code -1 with it).
type rootEvent struct {
	si  siginfoChld
	err error
}

// watchRoot registers pid's exit report; the caller holds r.mu shared
// (fork), so a watcher that took the signal of an early exit cannot look
// before the root is registered.
func (r *reaperState) watchRoot(pid int, f func(rootEvent)) {
	r.tabMu.Lock()
	r.watched[pid] = f
	r.tabMu.Unlock()
}

// unwatchRoot drops pid's report (a start that failed after the fork).
func (r *reaperState) unwatchRoot(pid int) {
	r.tabMu.Lock()
	delete(r.watched, pid)
	r.tabMu.Unlock()
}

// peekRoots reports every watched root that exited, once. The snapshot
// is taken under r.mu exclusively, after every fork in progress has
// registered its root; the waitids run without it.
func (r *reaperState) peekRoots() {
	r.mu.Lock()
	r.tabMu.Lock()
	pids := make([]int, 0, len(r.watched))
	for pid := range r.watched {
		pids = append(pids, pid)
	}
	r.tabMu.Unlock()
	r.mu.Unlock()
	for _, pid := range pids {
		var si siginfoChld
		err := peekPID(pid, &si)
		if err == nil && si.Pid == 0 {
			continue // still running
		}
		r.tabMu.Lock()
		f := r.watched[pid]
		delete(r.watched, pid)
		r.tabMu.Unlock()
		if f != nil {
			f(rootEvent{si: si, err: err})
		}
	}
}

// peekPID is one waitid on pid that neither blocks nor reaps.
func peekPID(pid int, si *siginfoChld) error {
	for {
		*si = siginfoChld{}
		err := unix.Waitid(unix.P_PID, pid, (*unix.Siginfo)(unsafe.Pointer(si)), unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}

// goLive starts settling once the process runs: at once (its goroutine
// waits on the pidfd), or, watched, when the watcher reports the exit.
func (p *proc) goLive() {
	if !p.b.multiplex {
		go p.run(nil)
		return
	}
	p.mu.Lock()
	p.live = true
	ev := p.rootSeen
	p.mu.Unlock()
	if ev != nil {
		go p.run(ev)
	}
}

// rootExited is the watcher's report for p's root.
func (p *proc) rootExited(ev rootEvent) {
	p.mu.Lock()
	p.rootSeen = &ev
	live := p.live
	p.mu.Unlock()
	if live {
		go p.run(&ev)
	}
}

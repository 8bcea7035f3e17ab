package local

import (
	"errors"
	"fmt"
	"math"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// Settling: root exit → bounded drain → kill survivors → reap the tree →
// read accounting → reap the root → done. The root is reaped last so its
// PID (= PGID = SID) stays pinned while anything may still signal it.

// siginfoChld is the SIGCHLD layout of siginfo_t (x/sys leaves it opaque).
type siginfoChld struct {
	Signo, Errno, Code, _ int32
	Pid                   int32
	Uid                   uint32
	Status                int32
	_                     [100]byte
}

// waitRoot blocks until the root exits; with nowait it stays a zombie.
// It goes by PID, not pidfd: the root is our child and unreaped, so its
// PID cannot have been reused, and the pidfd is non-blocking (a waitid on
// it would return EAGAIN instead of waiting).
func (p *proc) waitRoot(nowait bool, ru *unix.Rusage) (siginfoChld, error) {
	var si siginfoChld
	opts := unix.WEXITED
	if nowait {
		opts |= unix.WNOWAIT
	}
	for {
		err := unix.Waitid(unix.P_PID, p.pid, (*unix.Siginfo)(unsafe.Pointer(&si)), opts, ru)
		if err == unix.EINTR {
			continue
		}
		return si, err
	}
}

// reapRoot reaps the root (after which nothing may signal it) and closes
// its pidfd, under sigMu so no signal is in flight.
func (p *proc) reapRoot() (siginfoChld, unix.Rusage, error) {
	var ru unix.Rusage
	p.sigMu.Lock()
	si, err := p.waitRoot(false, &ru)
	p.reaped = true
	if p.pidfd != nil {
		p.pidfd.close()
		p.pidfd = nil
	}
	p.sigMu.Unlock()
	reaper.removeRoot(p.pid)
	return si, ru, err
}

// run is the settle sequence, on its own goroutine: from a successful
// start, or (watched) from the root's exit, ev.
func (p *proc) run(ev *rootEvent) {
	exit := p.rootExit(ev)
	p.drain()
	errs := []error{p.settleErr}
	ru, err := p.endTree(&exit)
	errs = append(errs, err)
	p.judgeCPU(&exit, ru)
	if p.group != nil && !p.pooled {
		errs = append(errs, p.group.Remove())
	}
	if p.stdinInner != nil {
		p.stdinInner.Close()
	}
	p.settleErr = errors.Join(errs...)
	p.exit = exit
	close(p.done)
	p.recycleGroup()
	p.mu.Lock()
	hooks := p.afterDone
	p.afterDone, p.hooksRan = nil, true
	p.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// rootExit waits for the root to exit, leaving it a zombie, without an
// OS thread: the settle goroutine parks on the pidfd in the runtime's
// poller (pidFD.waitExit). An earlier try at that lost wake-ups (+4 ms
// per process): the pidfd could turn readable before waitid listed the
// zombie, and edge-triggered epoll gives no second edge. waitExit never
// returns to the poller while the pidfd's level says readable; it retries
// waitid on the goroutine instead. Without a pollable pidfd (or should
// waitid lag past a bound) the wait is a blocking waitid on its own thread.
//
// A watched root (Options.Multiplex) has exited already: ev is what the
// watcher saw.
func (p *proc) rootExit(ev *rootEvent) sandbox.Exit {
	var si siginfoChld
	var err error
	if ev != nil {
		si, err = ev.si, ev.err
	} else {
		si, err = p.awaitRoot()
	}
	exit := sandbox.Exit{At: time.Now()}
	switch {
	case err != nil:
		p.settleErr = fmt.Errorf("wait root: %w", err)
		exit.Code = -1
	case si.Code == 1: // CLD_EXITED
		exit.Code = int(si.Status)
	default: // CLD_KILLED, CLD_DUMPED
		exit.Signal = syscall.Signal(si.Status)
	}
	return exit
}

// awaitRoot is rootExit's wait: in the poller where it can be, else
// blocking.
func (p *proc) awaitRoot() (siginfoChld, error) {
	if p.pidfd != nil {
		if si, seen, err := p.pidfd.waitExit(); seen || err != nil {
			return si, err
		}
	}
	return p.waitRoot(true, nil)
}

// endTree kills what survives the root, reaps it, reads the accounting
// and reaps the root: a tree does not outlive its settlement.
func (p *proc) endTree(exit *sandbox.Exit) (unix.Rusage, error) {
	tracking := p.group != nil && p.group.Tracking()
	members, merr := p.members()
	hadMembers := !tracking || merr != nil || len(members) > 0
	p.groupEmpty = tracking && !hadMembers
	if hadMembers {
		p.sigMu.Lock()
		p.signalTree(syscall.SIGKILL)
		p.sigMu.Unlock()
	}
	if !tracking {
		return p.endSession(exit), nil
	}
	return p.endGroup(exit, hadMembers)
}

// endGroup ends a tree its cgroup tracks.
func (p *proc) endGroup(exit *sandbox.Exit, hadMembers bool) (unix.Rusage, error) {
	var err error
	if hadMembers {
		p.sigMu.Lock()
		p.cgKilled = true
		p.sigMu.Unlock()
		err = p.group.Kill(5 * time.Second)
	}
	p.readAccounting(exit)
	// The group is empty: nothing will be signalled again, so the root
	// can go now. Its descendants' zombies (adopted by us) are reaped
	// next; the probe skips the scan when there are none.
	_, ru, _ := p.reapRoot()
	if hadMembers || anyZombieChild() {
		only := p.cgv2
		if only == "" {
			only = p.cgPathAny()
		}
		reaper.reapGroup(only, p.pid, time.Second)
	}
	return ru, err
}

// endSession ends a tree without a cgroup: the session is the only handle
// on it (signalTree scanned it), and the root's PID (= SID) must stay
// pinned while its zombies are looked for.
func (p *proc) endSession(exit *sandbox.Exit) unix.Rusage {
	pending := reaper.reapGroup("", p.pid, time.Second)
	p.readAccounting(exit)
	_, ru, _ := p.reapRoot()
	if pending > 0 {
		// Killed members still in their exit path: without a cgroup only
		// the session names them, and reapRoot just unregistered it.
		reaper.linger(p.pid)
	}
	return ru
}

// judgeCPU attributes a SIGXCPU, or a SIGKILL after the CPU budget was
// spent (the hard rlimit, one second past the soft one), to the CPU limit.
func (p *proc) judgeCPU(exit *sandbox.Exit, ru unix.Rusage) {
	if exit.KilledFor != "" || p.spec.Limits.CPUTime <= 0 {
		return
	}
	if exit.Signal != syscall.SIGXCPU && exit.Signal != syscall.SIGKILL {
		return
	}
	used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	limit := time.Duration(math.Ceil(p.spec.Limits.CPUTime.Seconds())) * time.Second
	if exit.Signal == syscall.SIGXCPU || used >= limit {
		exit.KilledFor = sandbox.LimitCPU
	}
}

// recycleGroup hands a pooled group back after done: Stats now answers
// from the cache, Cleanup skips the group, so the next process may have
// it. Never a group that saw cgroup.kill: on this kernel (6.18) a child
// cloned into it afterwards with CLONE_INTO_CGROUP is killed at birth.
func (p *proc) recycleGroup() {
	if !p.pooled {
		return
	}
	p.sigMu.Lock()
	killed := p.cgKilled
	p.sigMu.Unlock()
	var err error
	if killed {
		err = p.group.Remove()
	} else {
		err = releaseGroup(p.group, p.groupEmpty)
	}
	if err != nil {
		p.mu.Lock()
		p.settleErr = errors.Join(p.settleErr, err)
		p.mu.Unlock()
	}
}

// readAccounting reads the group's CPU, memory peak and OOM counter
// before the group goes away.
func (p *proc) readAccounting(exit *sandbox.Exit) {
	if p.group == nil {
		return
	}
	p.stats = p.groupStats()
	if n, ok := p.group.OOMKills(); ok && n > 0 {
		exit.KilledFor = sandbox.LimitMemory
	}
}

// anyZombieChild reports whether this process has a zombie child at all
// (cheap: one waitid that reaps nothing).
func anyZombieChild() bool {
	var si siginfoChld
	err := unix.Waitid(unix.P_ALL, 0, (*unix.Siginfo)(unsafe.Pointer(&si)), unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && si.Pid != 0
}

// members lists the live members of the tree's cgroup.
func (p *proc) members() ([]int, error) {
	if p.group == nil {
		return nil, cgroups.ErrUnsupported
	}
	return p.group.Procs()
}

// cgPathAny is the path of the group's v1 tracking leaf as
// /proc/<pid>/cgroup prints it.
func (p *proc) cgPathAny() string {
	for _, c := range []string{"pids", "memory"} {
		if _, ok := p.group.V1Dirs[c]; ok {
			return joinCg(p.b.cg.V1Paths[c], cgroups.Parent) + p.group.Name()
		}
	}
	return ""
}

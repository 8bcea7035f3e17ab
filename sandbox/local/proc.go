package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// proc is one local process: the Handle, and the Backend's record of it.
type proc struct {
	b     *Backend
	ref   sandbox.Ref
	spec  sandbox.ProcessSpec
	pid   int
	pidfd int            // -1 without pidfd support
	group *cgroups.Group // nil without cgroups
	// pooled: the group goes back to the pool after settling (pool.go);
	// cpuBase is its CPU counter when this process got it.
	pooled  bool
	cpuBase time.Duration
	cgv2    string // the group's v2 path as /proc/<pid>/cgroup shows it

	stdin      *sandbox.Stdin // exposed (StdinOpen)
	stdinInner *sandbox.Stdin // any mode with a pipe
	stdout     *sandbox.OutputLog
	stderr     *sandbox.OutputLog
	spillDir   *sandbox.SpillDir // nil without spill

	pumpsDone chan struct{}
	stopPumps chan struct{}
	readers   []*os.File
	pumpsLeft int // guarded by mu

	// sigMu orders signals before the root is reaped: once reaped is set
	// nothing is signalled any more (the PID may be reused).
	sigMu    sync.Mutex
	reaped   bool
	cgKilled bool // cgroup.kill was written: the group must not be reused
	// groupEmpty: settling saw the group empty after the root exited.
	groupEmpty bool

	done  chan struct{}
	exit  sandbox.Exit
	stats sandbox.Stats
	// settleErr records what settling could not do (survivors, cgroup
	// removal); Cleanup retries the removal and reports what still fails,
	// with this as context.
	settleErr error

	mu       sync.Mutex
	released bool
	cleaned  bool
}

var _ sandbox.Handle = (*proc)(nil)

// Start implements sandbox.Backend.
func (b *Backend) Start(ctx context.Context, spec sandbox.ProcessSpec) (sandbox.Handle, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	spec.Argv = append([]string(nil), spec.Argv...)
	spec.Env = append([]string(nil), spec.Env...)
	argv := spec.Argv
	if b.checkArgv0 {
		if err := unix.Access(spec.Argv[0], unix.X_OK); err != nil {
			return nil, &sandbox.SpawnError{Argv0: spec.Argv[0], Cause: err}
		}
	}
	if b.wrap != nil {
		w, err := b.wrap(spec)
		if err != nil {
			return nil, err
		}
		if len(w) == 0 || !filepath.IsAbs(w[0]) {
			return nil, fmt.Errorf("%s: wrapper argv[0] %q is not absolute: %w", b.name, strings.Join(w, " "), sandbox.ErrInvalidSpec)
		}
		argv = w
	}
	p := &proc{
		b:         b,
		ref:       sandbox.Ref{Backend: b.name, ID: newID(), Lifetime: sandbox.LifetimeHandle},
		spec:      spec,
		pidfd:     -1,
		done:      make(chan struct{}),
		pumpsDone: make(chan struct{}),
		stopPumps: make(chan struct{}),
	}
	if err := p.start(argv); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.procs[p.ref.ID] = p
	b.mu.Unlock()
	return p, nil
}

// start sets up cgroups, logs and pipes, forks, and launches the
// goroutines. On error everything it made is undone.
func (p *proc) start(argv []string) (err error) {
	spec := &p.spec
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	// Cgroup: a v2 leaf for tracking (and v2 limits), v1 leaves for the
	// limits v2 cannot enforce here.
	lim := cgroups.Limits{MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids}
	if p.b.cg != nil {
		g, pooled, err := p.b.newGroup(p.ref.ID, lim)
		if err != nil {
			kind := sandbox.LimitMemory
			if strings.HasPrefix(err.Error(), "pids") {
				kind = sandbox.LimitPids
			}
			if errors.Is(err, cgroups.ErrUnsupported) {
				return fmt.Errorf("%s limit: %w: %w", kind, sandbox.ErrLimitsUnsupported, err)
			}
			return fmt.Errorf("%s: cgroup: %w: %w", p.b.name, sandbox.ErrUnavailable, err)
		}
		p.group, p.pooled = g, pooled
		if pooled {
			undo = append(undo, func() { releaseGroup(g, false) })
			// A reused group's counters start where the last tree left.
			p.cpuBase, _ = g.CPUTime()
		} else {
			undo = append(undo, func() { g.Remove() })
		}
		if g.V2Dir != "" {
			p.cgv2 = joinCg(p.b.cg.V2Path, cgroups.Parent) + g.Name()
		}
	} else {
		if lim.MemoryBytes > 0 {
			return fmt.Errorf("memory limit: no cgroup hierarchy in use: %w", sandbox.ErrLimitsUnsupported)
		}
		if lim.Pids > 0 {
			return fmt.Errorf("pids limit: no cgroup hierarchy in use: %w", sandbox.ErrLimitsUnsupported)
		}
	}

	// Output logs.
	o := spec.Output
	if o.SpillBytes > 0 {
		// Created at the first byte of output: see OutputLogConfig.Spill.
		d, err := sandbox.NewSpillDir(o.SpillDir)
		if err != nil {
			return fmt.Errorf("output.spill-dir: %w", err)
		}
		p.spillDir = d
		undo = append(undo, func() { d.Remove() })
	}
	mk := func(name string) (*sandbox.OutputLog, error) {
		c := sandbox.OutputLogConfig{RingBytes: o.RingBytes, SpillBytes: o.SpillBytes, Overflow: o.Overflow}
		if o.SpillBytes > 0 {
			c.Spill, c.SpillName = p.spillDir, name+".log"
		}
		return sandbox.NewOutputLog(c)
	}
	if p.stdout, err = mk("stdout"); err != nil {
		return err
	}
	if p.stderr, err = mk("stderr"); err != nil {
		return err
	}

	// Pipes. The parent's ends come from os.Pipe: non-blocking, so reads
	// and writes take deadlines. The child's ends are made blocking by Fd.
	var childFiles []*os.File
	undo = append(undo, func() {
		for _, f := range childFiles {
			f.Close()
		}
	})
	var stdinW *os.File
	var stdinR *os.File
	if spec.Stdin.Mode == sandbox.StdinClosed {
		if stdinR, err = os.Open(os.DevNull); err != nil {
			return fmt.Errorf("stdin: %w: %w", sandbox.ErrUnavailable, err)
		}
	} else {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return fmt.Errorf("stdin pipe: %w: %w", sandbox.ErrUnavailable, err)
		}
		w := stdinW
		undo = append(undo, func() { w.Close() })
	}
	childFiles = append(childFiles, stdinR)
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stdout pipe: %w: %w", sandbox.ErrUnavailable, err)
	}
	growPipe(outR)
	childFiles = append(childFiles, outW)
	undo = append(undo, func() { outR.Close() })
	errR, errW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stderr pipe: %w: %w", sandbox.ErrUnavailable, err)
	}
	growPipe(errR)
	childFiles = append(childFiles, errW)
	undo = append(undo, func() { errR.Close() })

	// The exec helper, only when a limit needs it (see helper.go).
	var status *os.File
	var helperArgs []string
	if spec.Limits.OpenFiles > 0 {
		helperArgs = append(helperArgs, "-nofile", strconv.Itoa(spec.Limits.OpenFiles))
	}
	if spec.Limits.CPUTime > 0 {
		// RLIMIT_CPU has whole-second granularity: round up, never down.
		secs := int64(math.Ceil(spec.Limits.CPUTime.Seconds()))
		helperArgs = append(helperArgs, "-cpu", strconv.FormatInt(secs, 10))
	}
	if p.group != nil {
		for _, f := range p.group.JoinFiles() {
			helperArgs = append(helperArgs, "-join", f)
		}
	}
	files := []uintptr{stdinR.Fd(), outW.Fd(), errW.Fd()}
	execPath, execArgv, execEnv := argv[0], argv, spec.Env
	var envW *os.File
	if len(helperArgs) > 0 {
		sr, sw, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("status pipe: %w: %w", sandbox.ErrUnavailable, err)
		}
		status = sr
		undo = append(undo, func() { sr.Close() })
		childFiles = append(childFiles, sw)
		er, ew, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("env pipe: %w: %w", sandbox.ErrUnavailable, err)
		}
		envW = ew
		undo = append(undo, func() { ew.Close() })
		childFiles = append(childFiles, er)
		files = append(files, sw.Fd(), er.Fd())
		execPath = "/proc/self/exe"
		execArgv = append(append(append([]string{helperArg0}, helperArgs...), "--"), argv...)
		// The helper runs with an EMPTY environment and gets the real one
		// over fd 4: the host binary's init functions (and the Go runtime:
		// GODEBUG, GOGC, ...) must never see variables a guest chose.
		execEnv = []string{}
	}

	pidfd := -1
	attr := &syscall.ProcAttr{
		Dir:   spec.Cwd,
		Env:   execEnv,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true, PidFD: &pidfd},
	}
	if p.group != nil {
		fd, err := p.group.FD()
		if err != nil {
			return fmt.Errorf("%s: %w: %w", p.b.name, sandbox.ErrUnavailable, err)
		}
		if fd >= 0 {
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
		}
	}

	// Hold the reaper while forking and registering the root, so it never
	// sees the root's zombie before knowing it is a root.
	reaper.mu.RLock()
	pid, ferr := syscall.ForkExec(execPath, execArgv, attr)
	if ferr == nil {
		reaper.addRoot(pid)
	}
	reaper.mu.RUnlock()
	for _, f := range childFiles {
		f.Close()
	}
	childFiles = nil
	if p.group != nil && !p.pooled {
		p.group.CloseFD() // a pooled group keeps its descriptor for the next fork
	}
	if ferr != nil {
		return &sandbox.SpawnError{Argv0: argv[0], Cause: ferr}
	}
	p.pid, p.pidfd = pid, pidfd
	if envW != nil {
		// NUL-separated; written while the helper reads (it may exceed a
		// pipe buffer), closed so the helper sees EOF.
		go func(env []string) {
			for _, kv := range env {
				envW.Write(append([]byte(kv), 0))
			}
			envW.Close()
		}(spec.Env)
	}
	if status != nil {
		// EOF: the helper exec'd the program. Anything else: it failed
		// and exits; reap it here, it never became a process of ours.
		msg, _ := io.ReadAll(status)
		status.Close()
		if len(msg) > 0 {
			p.reapRoot()
			code, text, _ := strings.Cut(string(msg), " ")
			n, _ := strconv.Atoi(code)
			return &sandbox.SpawnError{Argv0: argv[0], Cause: &helperError{errno: syscall.Errno(n), msg: text}}
		}
	}

	// From here the process runs: no more undo.
	p.readers = []*os.File{outR, errR}
	p.pumpsLeft = 2
	go p.pump(outR, p.stdout)
	go p.pump(errR, p.stderr)
	if stdinW != nil {
		switch spec.Stdin.Mode {
		case sandbox.StdinOpen:
			p.stdin = sandbox.NewStdin(stdinW, spec.Stdin.Data)
			p.stdinInner = p.stdin
		case sandbox.StdinBytes:
			s := sandbox.NewStdin(stdinW, nil)
			p.stdinInner = s
			data := spec.Stdin.Data
			go func() {
				s.Write(context.Background(), data)
				s.Close()
			}()
		}
	}
	go p.run()
	return nil
}

// helperError is an exec failure reported by the helper; it unwraps to the
// errno so errors.Is(err, fs.ErrNotExist) works as for a direct exec.
type helperError struct {
	errno syscall.Errno
	msg   string
}

func (e *helperError) Error() string { return e.msg }
func (e *helperError) Unwrap() error { return e.errno }

func (p *proc) pump(r *os.File, l *sandbox.OutputLog) {
	defer func() {
		l.CloseWrite()
		r.Close()
		p.pumpDone()
	}()
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	rc, err := r.SyscallConn()
	if err != nil {
		return
	}
	for {
		room := l.WaitSpace(p.stopPumps)
		if room == 0 {
			break // stopped while full: the final sweep still counts the tail
		}
		n, err := readBatch(rc, buf[:min(int64(len(buf)), room)])
		if n > 0 {
			l.Write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	select {
	case <-p.stopPumps:
		finalSweep(rc, l, buf)
	default:
	}
}

// finalSweep reads, without waiting, what the pipe still holds when the
// drain bound stops the pump (bounded: a writer still running is killed
// right after).
func finalSweep(rc syscall.RawConn, l *sandbox.OutputLog, buf []byte) {
	rc.Control(func(fd uintptr) {
		for total := 0; total < 1<<20; {
			k, err := unix.Read(int(fd), buf)
			if err == unix.EINTR {
				continue
			}
			if k <= 0 || err != nil {
				return
			}
			l.Write(buf[:k])
			total += k
		}
	})
}

// readBatch reads whatever the pipe holds, up to len(buf), waiting (in
// the poller, honouring the read deadline) only while it is empty.
// Writers typically write 4 KiB at a time; one log write per batch
// instead of per 4 KiB keeps the spill's syscalls off the per-write path.
func readBatch(rc syscall.RawConn, buf []byte) (int, error) {
	n := 0
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		for n < len(buf) {
			k, err := unix.Read(int(fd), buf[n:])
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				return n > 0 // nothing yet: wait for data
			}
			if err != nil {
				rerr = err
				return true
			}
			if k == 0 {
				rerr = io.EOF
				return true
			}
			n += k
		}
		return true
	})
	if rerr == nil {
		rerr = err
	}
	return n, rerr
}

// growPipe asks for a 256 KiB pipe (default 64 KiB), best effort: a
// writer then blocks less while the pump is busy writing the spill file.
// Pipe pages are allocated as they fill, so quiet processes pay nothing.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 256<<10) })
	}
}

// pumpBufs recycles pump buffers: a spawn should not allocate and zero
// 256 KiB. 128 KiB reads keep the per-read overhead small in a flood.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// pumpDone closes pumpsDone once both pumps returned.
func (p *proc) pumpDone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.pumpsDone:
		return
	default:
	}
	p.pumpsLeft--
	if p.pumpsLeft == 0 {
		close(p.pumpsDone)
	}
}

// siginfoChld is the SIGCHLD layout of siginfo_t (x/sys leaves it opaque).
type siginfoChld struct {
	Signo, Errno, Code, _ int32
	Pid                   int32
	Uid                   uint32
	Status                int32
	_                     [100]byte
}

// waitRoot blocks until the root exits; with nowait it stays a zombie.
func (p *proc) waitRoot(nowait bool, ru *unix.Rusage) (siginfoChld, error) {
	var si siginfoChld
	opts := unix.WEXITED
	if nowait {
		opts |= unix.WNOWAIT
	}
	idType, id := unix.P_PIDFD, p.pidfd
	if p.pidfd < 0 {
		// Without pidfd the root is still safe to wait by PID: it is our
		// child and unreaped, so the PID cannot have been reused.
		idType, id = unix.P_PID, p.pid
	}
	for {
		err := unix.Waitid(idType, id, (*unix.Siginfo)(unsafe.Pointer(&si)), opts, ru)
		if err == unix.EINTR {
			continue
		}
		return si, err
	}
}

// reapRoot reaps the root (after which nothing may signal it).
func (p *proc) reapRoot() (siginfoChld, unix.Rusage, error) {
	var ru unix.Rusage
	p.sigMu.Lock()
	si, err := p.waitRoot(false, &ru)
	p.reaped = true
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
	p.sigMu.Unlock()
	reaper.removeRoot(p.pid)
	return si, ru, err
}

// run is the settle sequence: root exit → bounded drain → kill survivors
// → reap the tree → read accounting → reap the root → done.
func (p *proc) run() {
	// A blocking waitid on its own thread. (Parking the pidfd in the
	// netpoller was tried: the pidfd can turn readable before waitid
	// sees the zombie, and with edge-triggered epoll the wake-up is then
	// lost until something else happens: +4 ms per process here.)
	si, err := p.waitRoot(true, nil)
	at := time.Now()
	var exit sandbox.Exit
	switch {
	case err != nil:
		p.settleErr = fmt.Errorf("wait root: %w", err)
		exit.Code = -1
	case si.Code == 1: // CLD_EXITED
		exit.Code = int(si.Status)
	default: // CLD_KILLED, CLD_DUMPED
		exit.Signal = syscall.Signal(si.Status)
	}
	exit.At = at

	// Bounded drain: a descendant holding the pipes does not hold us.
	t := time.NewTimer(p.spec.Drain)
	select {
	case <-p.pumpsDone:
		t.Stop()
	case <-t.C:
		// Drain bound reached. What still sits in the pipes is captured
		// by one last sweep with backpressure lifted (so an unacknowledged
		// tail becomes counted drops, never an unseen loss), then the
		// pumps stop.
		p.stdout.LiftBackpressure()
		p.stderr.LiftBackpressure()
		close(p.stopPumps)
		p.mu.Lock()
		for _, r := range p.readers {
			r.SetReadDeadline(pastDeadline)
		}
		p.mu.Unlock()
		<-p.pumpsDone
	}

	// A tree does not outlive its settlement: kill survivors, reap them.
	var errs []error
	if p.settleErr != nil {
		errs = append(errs, p.settleErr)
	}
	tracking := p.group != nil && p.group.Tracking()
	members, merr := p.members()
	hadMembers := !tracking || merr != nil || len(members) > 0
	p.groupEmpty = tracking && !hadMembers
	if hadMembers {
		p.sigMu.Lock()
		p.signalTree(syscall.SIGKILL)
		p.sigMu.Unlock()
	}
	var ru unix.Rusage
	if tracking {
		if hadMembers {
			p.sigMu.Lock()
			p.cgKilled = true
			p.sigMu.Unlock()
			if err := p.group.Kill(5 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		p.readAccounting(&exit)
		// The group is empty: nothing will be signalled again, so the
		// root can go now. Its descendants' zombies (adopted by us) are
		// reaped next; the probe skips the scan when there are none.
		_, ru, _ = p.reapRoot()
		if hadMembers || anyZombieChild() {
			only := p.cgv2
			if only == "" {
				only = p.cgPathAny()
			}
			reaper.reapGroup(only, p.pid, time.Second)
		}
	} else {
		// No cgroup: the session is the only handle on the tree (signalTree
		// above scanned it), and the root's PID (= SID) must stay pinned
		// while its zombies are looked for.
		reaper.reapGroup("", p.pid, time.Second)
		p.readAccounting(&exit)
		_, ru, _ = p.reapRoot()
	}
	if exit.KilledFor == "" && p.spec.Limits.CPUTime > 0 && (exit.Signal == syscall.SIGXCPU || exit.Signal == syscall.SIGKILL) {
		used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		limit := time.Duration(math.Ceil(p.spec.Limits.CPUTime.Seconds())) * time.Second
		if exit.Signal == syscall.SIGXCPU || used >= limit {
			exit.KilledFor = sandbox.LimitCPU
		}
	}
	if p.group != nil && !p.pooled {
		if err := p.group.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.stdinInner != nil {
		p.stdinInner.Close()
	}
	p.settleErr = errors.Join(errs...)
	p.exit = exit
	close(p.done)
	if p.pooled {
		// After done: Stats now answers from the cache, Cleanup skips
		// the group, so the next process may have it. Never a group that
		// saw cgroup.kill: on this kernel (6.18) a child cloned into it
		// afterwards with CLONE_INTO_CGROUP is killed at birth.
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
}

// readAccounting reads the group's CPU, memory peak and OOM counter
// before the group goes away.
func (p *proc) readAccounting(exit *sandbox.Exit) {
	if p.group == nil {
		return
	}
	if d, ok := p.group.CPUTime(); ok {
		d -= p.cpuBase
		p.stats.CPUTime = &d
	}
	if m, ok := p.group.MemoryPeak(); ok {
		p.stats.MemoryPeak = &m
	}
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

var pastDeadline = time.Unix(1, 0)

// signalTree sends sig to the process group (safe: the root is not reaped,
// so PGID = root PID cannot be reused) and to every member of the cgroup,
// which catches descendants that left the group or the session. Caller
// holds sigMu and has checked !reaped.
func (p *proc) signalTree(sig syscall.Signal) {
	if p.reaped {
		return
	}
	_ = unix.Kill(-p.pid, sig)
	if p.pidfd >= 0 {
		_ = unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
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
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == p.pid {
			continue
		}
		st, ok := readStat(pid)
		if !ok || (st.sid != p.pid && st.pgid != p.pid) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if st2, ok := readStat(pid); ok && st2.start == st.start {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
}

// Ref implements sandbox.Handle.
func (p *proc) Ref() sandbox.Ref { return p.ref }

// PID implements sandbox.Handle.
func (p *proc) PID() int { return p.pid }

// Stdin implements sandbox.Handle.
func (p *proc) Stdin() *sandbox.Stdin { return p.stdin }

// Stdout implements sandbox.Handle.
func (p *proc) Stdout() *sandbox.OutputLog { return p.stdout }

// Stderr implements sandbox.Handle.
func (p *proc) Stderr() *sandbox.OutputLog { return p.stderr }

// Done implements sandbox.Handle.
func (p *proc) Done() <-chan struct{} { return p.done }

// Wait implements sandbox.Handle.
func (p *proc) Wait(ctx context.Context) (sandbox.Exit, error) {
	select {
	case <-p.done:
		return p.exit, nil
	default:
	}
	select {
	case <-p.done:
		return p.exit, nil
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
}

// Signal implements sandbox.Handle.
func (p *proc) Signal(sig syscall.Signal) error {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.reaped {
		return nil
	}
	p.signalTree(sig)
	return nil
}

// Terminate implements sandbox.Handle.
func (p *proc) Terminate(ctx context.Context, mode sandbox.TerminateMode) (sandbox.Exit, error) {
	select {
	case <-p.done:
		return p.exit, nil
	default:
	}
	switch mode {
	case sandbox.Graceful:
		p.Signal(syscall.SIGTERM)
		t := time.NewTimer(p.spec.Grace)
		defer t.Stop()
		select {
		case <-p.done:
			return p.exit, nil
		case <-t.C:
			return sandbox.Exit{}, fmt.Errorf("process %s still running %v after SIGTERM: %w", p.ref.ID, p.spec.Grace, sandbox.ErrGracefulTimeout)
		case <-ctx.Done():
			return sandbox.Exit{}, ctx.Err()
		}
	case sandbox.Force:
		p.Signal(syscall.SIGKILL)
		return p.Wait(ctx)
	}
	return sandbox.Exit{}, fmt.Errorf("terminate mode %d: %w", mode, sandbox.ErrInvalidSpec)
}

// Stats implements sandbox.Handle: the cgroup's CPU time and memory peak
// where the group accounts them; nil otherwise.
func (p *proc) Stats() sandbox.Stats {
	select {
	case <-p.done:
		return p.stats
	default:
	}
	var s sandbox.Stats
	if p.group != nil {
		if d, ok := p.group.CPUTime(); ok {
			d -= p.cpuBase
			s.CPUTime = &d
		}
		if m, ok := p.group.MemoryPeak(); ok {
			s.MemoryPeak = &m
		}
	}
	return s
}

// Release implements sandbox.Handle.
func (p *proc) Release() error {
	select {
	case <-p.done:
	default:
		return fmt.Errorf("process %s is running with handle lifetime: %w", p.ref.ID, sandbox.ErrNotDetachable)
	}
	p.mu.Lock()
	p.released = true
	p.mu.Unlock()
	return nil
}

func (p *proc) isReleased() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released
}

// cleanup removes the logs' spill files and the spill directory, and
// retries a cgroup removal that failed while settling.
func (p *proc) cleanup() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cleaned {
		return nil
	}
	var errs []error
	for _, l := range []*sandbox.OutputLog{p.stdout, p.stderr} {
		if err := l.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.spillDir != nil {
		if err := p.spillDir.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.group != nil && !p.pooled {
		if err := p.group.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if p.settleErr != nil {
			err = fmt.Errorf("%w (while settling: %v)", err, p.settleErr)
		}
		return fmt.Errorf("cleanup %s: %w", p.ref.ID, err)
	}
	p.cleaned = true
	return nil
}

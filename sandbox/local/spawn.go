package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// The steps of proc.start, in order: cgroup, logs, pipes, exec setup,
// fork, and the exec helper's verdict.

// spawn is one start's state between its steps.
type spawn struct {
	argv []string // what runs: the wrapper's argv when wrapped
	undo undoStack
	// child holds the child's ends of the pipes, closed once forked.
	child []*os.File
	// The parent's ends: stdin (nil when closed), stdout, stderr, and the
	// exec helper's status and environment pipes (nil without it).
	stdinW, outR, errR, status, envW *os.File
	// What ForkExec runs: path, argv, environment and the child's fds.
	path  string
	args  []string
	env   []string
	files []uintptr
}

// undoStack is what a failed start takes back, last made first undone.
type undoStack []func()

func (u *undoStack) push(f func()) { *u = append(*u, f) }

func (u *undoStack) run() {
	for i := len(*u) - 1; i >= 0; i-- {
		(*u)[i]()
	}
	*u = nil
}

// closeChild closes the child's ends (after the fork, or on undo).
func (s *spawn) closeChild() {
	for _, f := range s.child {
		f.Close()
	}
	s.child = nil
}

// setupCgroup makes the process's cgroup: a v2 leaf for tracking (and v2
// limits), v1 leaves for the limits v2 cannot enforce here.
func (p *proc) setupCgroup(s *spawn) error {
	lim := cgroups.Limits{MemoryBytes: p.spec.Limits.MemoryBytes, Pids: p.spec.Limits.Pids}
	if p.b.cg == nil {
		if lim.MemoryBytes > 0 {
			return fmt.Errorf("memory limit: no cgroup hierarchy in use: %w", sandbox.ErrLimitsUnsupported)
		}
		if lim.Pids > 0 {
			return fmt.Errorf("pids limit: no cgroup hierarchy in use: %w", sandbox.ErrLimitsUnsupported)
		}
		return nil
	}
	g, pooled, err := p.b.newGroup(p.ref.ID, lim)
	if err != nil {
		return p.groupError(err)
	}
	p.group, p.pooled = g, pooled
	if pooled {
		s.undo.push(func() { releaseGroup(g, false) })
		// A reused group's counters start where the last tree left.
		p.cpuBase, _ = g.CPUTime()
	} else {
		s.undo.push(func() { g.Remove() })
	}
	if g.V2Dir != "" {
		p.cgv2 = joinCg(p.b.cg.V2Path, cgroups.Parent) + g.Name()
	}
	return nil
}

// groupError classifies a failure to make the cgroup: a limit no
// hierarchy can enforce is ErrLimitsUnsupported naming the limit (the
// cgroups.LimitError's controller); anything else is ErrUnavailable.
func (p *proc) groupError(err error) error {
	if !errors.Is(err, cgroups.ErrUnsupported) {
		return fmt.Errorf("%s: cgroup: %w: %w", p.b.name, sandbox.ErrUnavailable, err)
	}
	kind := sandbox.LimitMemory
	var le *cgroups.LimitError
	if errors.As(err, &le) && le.Controller == "pids" {
		kind = sandbox.LimitPids
	}
	return fmt.Errorf("%s limit: %w: %w", kind, sandbox.ErrLimitsUnsupported, err)
}

// setupLogs makes the output logs and, with spilling, their directory
// (created at the first byte of output: see OutputLogConfig.Spill).
func (p *proc) setupLogs(s *spawn) error {
	o := p.spec.Output
	if o.SpillBytes > 0 {
		d, err := sandbox.NewSpillDir(o.SpillDir)
		if err != nil {
			return fmt.Errorf("output.spill-dir: %w", err)
		}
		p.spillDir = d
		s.undo.push(func() { d.Remove() })
	}
	mk := func(name string) (*sandbox.OutputLog, error) {
		c := sandbox.OutputLogConfig{RingBytes: o.RingBytes, SpillBytes: o.SpillBytes, Overflow: o.Overflow, Rate: o.Rate}
		if o.SpillBytes > 0 {
			c.Spill, c.SpillName = p.spillDir, name+".log"
		}
		return sandbox.NewOutputLog(c)
	}
	var err error
	if p.stdout, err = mk("stdout"); err != nil {
		return err
	}
	p.stderr, err = mk("stderr")
	return err
}

// setupPipes makes stdin (a pipe, or /dev/null when closed), stdout and
// stderr. The parent's ends come from os.Pipe: non-blocking, so reads and
// writes take deadlines. The child's ends are made blocking by Fd.
func (p *proc) setupPipes(s *spawn) error {
	s.undo.push(s.closeChild)
	var stdinR *os.File
	var err error
	if p.spec.Stdin.Mode == sandbox.StdinClosed {
		if stdinR, err = os.Open(os.DevNull); err != nil {
			return fmt.Errorf("stdin: %w: %w", sandbox.ErrUnavailable, err)
		}
	} else {
		if stdinR, s.stdinW, err = os.Pipe(); err != nil {
			return fmt.Errorf("stdin pipe: %w: %w", sandbox.ErrUnavailable, err)
		}
		w := s.stdinW
		s.undo.push(func() { w.Close() })
	}
	s.child = append(s.child, stdinR)
	s.files = append(s.files, stdinR.Fd())
	if s.outR, err = s.outputPipe("stdout"); err != nil {
		return err
	}
	s.errR, err = s.outputPipe("stderr")
	return err
}

// outputPipe makes one output pipe, its write end the child's next fd.
func (s *spawn) outputPipe(name string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%s pipe: %w: %w", name, sandbox.ErrUnavailable, err)
	}
	growPipe(r)
	s.child = append(s.child, w)
	s.undo.push(func() { r.Close() })
	s.files = append(s.files, w.Fd())
	return r, nil
}

// setupExec decides what is exec'd: the program itself, or the exec
// helper (helper.go) when a limit needs it, with its status pipe (fd 3)
// and environment pipe (fd 4).
func (p *proc) setupExec(s *spawn) error {
	s.path, s.args, s.env = p.execFile(s), s.argv, p.spec.Env
	flags := p.helperFlags()
	if len(flags) == 0 {
		return nil
	}
	if s.path != s.argv[0] {
		flags = append(flags, "-exec", s.path)
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("status pipe: %w: %w", sandbox.ErrUnavailable, err)
	}
	s.status = sr
	s.undo.push(func() { sr.Close() })
	s.child = append(s.child, sw)
	er, ew, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("env pipe: %w: %w", sandbox.ErrUnavailable, err)
	}
	s.envW = ew
	s.undo.push(func() { ew.Close() })
	s.child = append(s.child, er)
	s.files = append(s.files, sw.Fd(), er.Fd())
	s.path = reexec.Self
	s.args = append(append(append([]string{helperRole}, flags...), "--"), s.argv...)
	// The helper runs with an EMPTY environment and gets the real one
	// over fd 4: the host binary's init functions (and the Go runtime:
	// GODEBUG, GOGC, ...) must never see variables a guest chose.
	s.env = []string{}
	return nil
}

// execFile is the file that runs: the spec's checked Path (or Argv[0])
// when the program runs directly; the wrapper's argv[0] when wrapped (the
// wrapper puts Path in its own argv: bwrap.Args).
func (p *proc) execFile(s *spawn) string {
	if p.b.wrap == nil {
		return p.spec.ExecFile()
	}
	return s.argv[0]
}

// helperFlags are the exec helper's flags for this spec; none means the
// program is exec'd directly.
func (p *proc) helperFlags() []string {
	var flags []string
	if n := p.spec.Limits.OpenFiles; n > 0 {
		flags = append(flags, "-nofile", strconv.Itoa(n))
	}
	if c := p.spec.Limits.CPUTime; c > 0 {
		// RLIMIT_CPU has whole-second granularity: round up, never down.
		secs := int64(math.Ceil(c.Seconds()))
		flags = append(flags, "-cpu", strconv.FormatInt(secs, 10))
	}
	if p.group != nil {
		for _, f := range p.group.JoinFiles() {
			flags = append(flags, "-join", f)
		}
	}
	return flags
}

// fork starts the root in its own session (a terminal's slave its
// controlling tty), born into the v2 leaf where
// there is one (clone3 CLONE_INTO_CGROUP), with a pidfd.
func (p *proc) fork(s *spawn) error {
	pidfd := -1
	attr := &syscall.ProcAttr{
		Dir:   p.spec.Cwd,
		Env:   s.env,
		Files: s.files,
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	if !p.b.multiplex {
		attr.Sys.PidFD = &pidfd // watched roots hold none (watch.go)
	}
	// A terminal's slave (fd 0) becomes the new session's controlling tty.
	attr.Sys.Setctty = p.spec.Terminal != nil
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
	var pid int
	err := retryBusy(func() (err error) {
		reaper.mu.RLock()
		defer reaper.mu.RUnlock()
		if pid, err = syscall.ForkExec(s.path, s.args, attr); err == nil {
			reaper.addRoot(pid)
			if p.b.multiplex {
				reaper.watchRoot(pid, p.rootExited)
			}
		}
		return err
	})
	s.closeChild()
	switch {
	case p.group == nil:
	case p.b.multiplex:
		p.group.Idle() // no descriptor per live group either (Multiplex)
	case !p.pooled:
		p.group.CloseFD() // a pooled group keeps its descriptor for the next fork
	}
	if err != nil {
		return &sandbox.SpawnError{Argv0: s.argv[0], Cause: err}
	}
	p.pid, p.pidfd = pid, newPidFD(pidfd)
	return nil
}

// retryBusy runs exec until it fails with anything but ETXTBSY ("text
// file busy"), at most 9 times, 1 to 128 ms apart (255 ms in all). ETXTBSY
// means a process holds the program open for writing. Most often that is
// a child this daemon forked while a capsule's write of the program (a
// script it just made) was still open: the child holds the descriptor
// until its own exec a moment later (Go issue 22315), so an agent's
// "write a script, run it" would fail at random under load. A program
// really being written stays busy, and its spawn still fails. The bound
// leaves room for a loaded machine, where a child may wait tens of ms
// between its fork and its exec.
func retryBusy(exec func() error) error {
	err := exec()
	for d := time.Millisecond; errors.Is(err, syscall.ETXTBSY) && d <= 128*time.Millisecond; d *= 2 {
		time.Sleep(d)
		err = exec()
	}
	return err
}

// awaitExec feeds the exec helper the environment and reads its verdict.
// EOF on the status pipe: the helper exec'd the program. Anything else is
// "<errno> <message>" (the helper's protocol, helper.go): it failed and
// exits, and is reaped here, never having become a process of ours.
func (p *proc) awaitExec(s *spawn) error {
	if s.status == nil {
		return nil
	}
	go sendEnv(s.envW, p.spec.Env)
	msg, _ := io.ReadAll(s.status)
	s.status.Close()
	if len(msg) == 0 {
		return nil
	}
	reaper.unwatchRoot(p.pid)
	p.reapRoot()
	code, text, _ := strings.Cut(string(msg), " ")
	n, _ := strconv.Atoi(code)
	return &sandbox.SpawnError{Argv0: s.argv[0], Cause: &helperError{errno: syscall.Errno(n), msg: text}}
}

// sendEnv writes the environment NUL-separated while the helper reads it
// (it may exceed a pipe buffer), then closes w so the helper sees EOF.
func sendEnv(w *os.File, env []string) {
	for _, kv := range env {
		w.Write(append([]byte(kv), 0))
	}
	w.Close()
}

// startStdin wires stdin: exposed (StdinOpen), or fed the spec's bytes
// and closed (StdinBytes). w is nil when stdin is closed.
func (p *proc) startStdin(w *os.File) {
	if w == nil {
		return
	}
	switch p.spec.Stdin.Mode {
	case sandbox.StdinOpen:
		p.stdin = sandbox.NewStdin(w, p.spec.Stdin.Data)
		p.stdinInner = p.stdin
	case sandbox.StdinBytes:
		s := sandbox.NewStdin(w, nil)
		p.stdinInner = s
		data := p.spec.Stdin.Data
		go func() {
			s.Write(context.Background(), data)
			s.Close()
		}()
	}
}

package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

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
	pidfd *pidFD         // nil without pidfd support; reapRoot closes it under sigMu
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
	// master is the PTY master the pump reads (terminal.go), nil without
	// a terminal; Resize's descriptor, closed by the pump.
	master *os.File

	pumpsDone chan struct{}
	stopPumps chan struct{}
	readers   []*os.File
	pumpsLeft int // guarded by mu
	// loopStreams are its streams on the pump loop (guarded by loop.mu).
	loopStreams []*loopStream
	// live and rootSeen (guarded by mu) hand a watched root's exit
	// (Multiplex) to settling: whichever of the start's end and the
	// watcher's report comes second starts it.
	live     bool
	rootSeen *rootEvent

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
	// afterDone: AfterDone's functions, run once settled (hooksRan).
	afterDone []func()
	hooksRan  bool
}

var _ sandbox.Handle = (*proc)(nil)

// Start implements sandbox.Backend.
func (b *Backend) Start(ctx context.Context, spec sandbox.ProcessSpec) (sandbox.Handle, error) {
	if err := spec.ValidateTerminal(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	spec.Argv = append([]string(nil), spec.Argv...)
	spec.Env = append([]string(nil), spec.Env...)
	if t := spec.Terminal; t != nil {
		tc := *t
		spec.Terminal = &tc
		spec.Env = sandbox.WithTerm(spec.Env, tc.Term)
	}
	argv, err := b.execArgv(spec)
	if err != nil {
		return nil, err
	}
	p := &proc{
		b:         b,
		ref:       sandbox.Ref{Backend: b.name, ID: newID(), Lifetime: sandbox.LifetimeHandle},
		spec:      spec,
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

// execArgv is what runs for spec: its argv, or the wrapper's (checked to
// be absolute, after checking that spec.Argv[0] is executable here).
func (b *Backend) execArgv(spec sandbox.ProcessSpec) ([]string, error) {
	if err := sandbox.CheckExecPath(&spec); err != nil {
		return nil, err
	}
	if b.checkArgv0 {
		if err := unix.Access(spec.ExecFile(), unix.X_OK); err != nil {
			return nil, &sandbox.SpawnError{Argv0: spec.Argv[0], Cause: err}
		}
	}
	if b.wrap == nil {
		return spec.Argv, nil
	}
	w, err := b.wrap(spec)
	if err != nil {
		return nil, err
	}
	if len(w) == 0 || !filepath.IsAbs(w[0]) {
		return nil, fmt.Errorf("%s: wrapper argv[0] %q is not absolute: %w", b.name, strings.Join(w, " "), sandbox.ErrInvalidSpec)
	}
	return w, nil
}

// start makes the process: its cgroup, logs and pipes, the exec (direct,
// or through the exec helper), then the pumps, stdin and the settle
// goroutine. Each step pushes the undoing of what it made; a failed start
// runs that stack, so nothing of it is left behind.
func (p *proc) start(argv []string) (err error) {
	s := &spawn{argv: argv}
	defer func() {
		if err != nil {
			s.undo.run()
		}
	}()
	if err := p.setupCgroup(s); err != nil {
		return err
	}
	if err := p.setupLogs(s); err != nil {
		return err
	}
	setup := p.setupPipes
	if p.spec.Terminal != nil {
		setup = p.setupTerminal
	}
	if err := setup(s); err != nil {
		return err
	}
	if err := p.setupExec(s); err != nil {
		return err
	}
	if err := p.fork(s); err != nil {
		return err
	}
	if err := p.awaitExec(s); err != nil {
		return err
	}
	// From here the process runs: nothing is undone.
	p.startPumps(s.outR, s.errR)
	p.startStdin(s.stdinW)
	p.goLive()
	return nil
}

// Package local is the local Linux execution backend: plain host
// processes, each owned as a whole tree.
//
// Ownership, in one paragraph: every process gets its own session and
// process group (setsid), is born into its own cgroup v2 leaf where a v2
// hierarchy is writable (clone3 CLONE_INTO_CGROUP, so nothing it forks can
// slip out between fork and join), is waited and signalled through a pidfd,
// and its root is reaped LAST: the root's PID (which is also the PGID and
// SID) stays pinned by its zombie until the process has settled, so a
// group signal can never reach a reused PID. The host process is the child
// subreaper, so orphaned descendants are re-parented to it; a reaper reaps
// only zombies it can prove belong to one of our trees (cgroup path or
// session), never a wait(-1) that would steal os/exec statuses.
//
// The bwrap backend is this backend with an argv prefix: see Options.Wrap.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// Options configure a Backend.
type Options struct {
	// Name is the backend name carried in every Ref ("local" if empty).
	Name string
	// Wrap, if set, returns the argv actually executed for spec, e.g.
	// ["/usr/bin/bwrap", ...flags, "--", spec.Argv...]. It runs after the
	// spec was validated. Everything else (session, group, cgroup, pidfd,
	// limits, pipes, settling, reaping) is this backend's, and the wrapper
	// process is the root of the tree: its exit status is the Exit. The
	// wrapper is started with Dir = spec.Cwd and Env = spec.Env.
	// A Wrap error fails Start as is (wrap it with sandbox.ErrInvalidSpec
	// or sandbox.ErrUnavailable as appropriate).
	Wrap func(spec sandbox.ProcessSpec) (argv []string, err error)
	// NoArgv0Check turns off the check, done only when Wrap is set, that
	// spec.Argv[0] exists and is executable on the host before the wrapper
	// starts. A wrapper reports a missing program as its own exit status,
	// too late for a typed *SpawnError; the check gives callers the same
	// error as an unwrapped start. Turn it off when the sandbox sees a
	// different filesystem than the host at that path.
	NoArgv0Check bool
	// NoCgroups disables every cgroup use (tracking and limits). For tests
	// of the fallback path; memory and pids limits then give
	// ErrLimitsUnsupported.
	NoCgroups bool
	// Multiplex follows every process without a descriptor or goroutine
	// of its own while it runs: one shared epoll loop reads all output
	// pipes (loop.go) and one SIGCHLD watcher notices every root's exit
	// (watch.go) instead of a pidfd each; the settle goroutine starts at
	// the exit. For a host process that keeps many long-lived trees (the
	// keeper); a live process then costs two pipe descriptors (one PTY
	// master with a terminal) and no goroutine.
	Multiplex bool
}

// Backend is the local backend. Safe for concurrent use.
type Backend struct {
	name string
	wrap func(sandbox.ProcessSpec) ([]string, error)
	cg   *cgroups.System // nil: no cgroups
	// checkArgv0: see Options.NoArgv0Check.
	checkArgv0 bool
	multiplex  bool

	mu    sync.Mutex
	procs map[string]*proc
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns a local backend. It makes the host process a child subreaper
// (process-wide and idempotent) and starts the shared orphan reaper.
func New(opts Options) (*Backend, error) {
	b := &Backend{name: opts.Name, wrap: opts.Wrap, checkArgv0: opts.Wrap != nil && !opts.NoArgv0Check, multiplex: opts.Multiplex, procs: map[string]*proc{}}
	if b.name == "" {
		b.name = "local"
	}
	if err := startReaper(); err != nil {
		return nil, fmt.Errorf("local: %w: %w", sandbox.ErrUnavailable, err)
	}
	if !opts.NoCgroups {
		if s, err := cgroups.Detect(); err == nil {
			b.cg = s
		}
	}
	return b, nil
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return b.name }

func newID() string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

func (b *Backend) lookup(ref sandbox.Ref) (*proc, error) {
	if ref.Backend != b.name {
		return nil, fmt.Errorf("ref of backend %q given to %q: %w", ref.Backend, b.name, sandbox.ErrNotFound)
	}
	b.mu.Lock()
	p := b.procs[ref.ID]
	b.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("process %s: %w", ref.ID, sandbox.ErrNotFound)
	}
	return p, nil
}

// Attach returns the live handle of a process this Backend value started
// and whose handle was not released. Local processes have handle lifetime:
// they are not adoptable by another Backend value or after a restart.
func (b *Backend) Attach(ctx context.Context, ref sandbox.Ref) (sandbox.Handle, error) {
	p, err := b.lookup(ref)
	if err != nil {
		return nil, err
	}
	if p.isReleased() {
		return nil, fmt.Errorf("process %s: handle released: %w", ref.ID, sandbox.ErrNotFound)
	}
	return p, nil
}

// Inspect reports the phase of a process started by this Backend value.
func (b *Backend) Inspect(ctx context.Context, ref sandbox.Ref) (sandbox.Inspection, error) {
	if err := ctx.Err(); err != nil {
		return sandbox.Inspection{}, err
	}
	p, err := b.lookup(ref)
	if err != nil {
		return sandbox.Inspection{Phase: sandbox.PhaseMissing}, nil
	}
	select {
	case <-p.done:
		e := p.exit
		return sandbox.Inspection{Phase: sandbox.PhaseExited, Exit: &e}, nil
	default:
		return sandbox.Inspection{Phase: sandbox.PhaseRunning}, nil
	}
}

// Cleanup removes an exited process's spill files and bookkeeping. Unknown
// refs are fine (idempotent). ErrRunning while it runs; never signals.
func (b *Backend) Cleanup(ctx context.Context, ref sandbox.Ref) error {
	if ref.Backend != b.name {
		return fmt.Errorf("ref of backend %q given to %q: %w", ref.Backend, b.name, sandbox.ErrNotFound)
	}
	b.mu.Lock()
	p := b.procs[ref.ID]
	b.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
	default:
		return fmt.Errorf("cleanup %s: %w", ref.ID, sandbox.ErrRunning)
	}
	if err := p.cleanup(); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.procs, ref.ID)
	b.mu.Unlock()
	return nil
}

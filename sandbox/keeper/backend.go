package keeper

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
	"golang.org/x/sys/unix"
)

// Bounds of the daemon side of a keeper.
const (
	// dialBound bounds one dial, or one start of a keeper and its dial.
	dialBound = 30 * time.Second
	// opBound bounds a control call that has no caller's deadline
	// (signal, stats, close-stdin).
	opBound = 10 * time.Second
	// lostBound is how long a handle keeps trying to reach a keeper
	// (starting a new one) before its Wait says the attachment is lost.
	lostBound = time.Minute
)

// Backend is the sandbox.Backend of the processes a keeper holds: the
// daemon's persistent tier. It dials the keeper of Config.Dir, starting
// one when none runs, and every Ref it issues is LifetimeBackend: a fresh
// Backend in a new daemon attaches from the Ref alone (Attach, Inspect,
// Cleanup), which is how a restarted daemon re-adopts its processes.
//
// The keeper is started lazily, by the first call that needs one, so a
// daemon with no persistent process runs no keeper.
type Backend struct {
	cfg Config

	mu     sync.Mutex
	c      *Client
	closed bool
	// listed is the last List's answer, by ref ID, for snapshotTTL: a
	// restarted daemon lists once and attaches every process from it,
	// instead of one inspect round trip each (re-adopting 1,000).
	listed   map[string]Status
	listedAt time.Time
}

// snapshotTTL bounds how stale a listed status may be when Attach uses it:
// a process listed as running may have exited since, which its handle's
// Wait then reports; one listed at all was held by the keeper.
const snapshotTTL = 5 * time.Second

var (
	_ sandbox.Backend = (*Backend)(nil)
	_ sandbox.Lister  = (*Backend)(nil)
)

// NewBackend returns the keeper-backed backend of cfg.Dir; cfg.Name is
// its name in refs (the registry's backend name, "local" or "bwrap").
func NewBackend(cfg Config) (*Backend, error) {
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("keeper directory %q must be absolute: %w", cfg.Dir, sandbox.ErrInvalidSpec)
	}
	if cfg.Name == "" {
		return nil, fmt.Errorf("keeper backend needs a name: %w", sandbox.ErrInvalidSpec)
	}
	return &Backend{cfg: cfg}, nil
}

// Name is the backend name in every Ref.
func (b *Backend) Name() string { return b.cfg.Name }

// Dir is the keeper's directory.
func (b *Backend) Dir() string { return b.cfg.Dir }

// client returns a live client of the directory's keeper, dialling it,
// or starting one when none answers (a new keeper first recovers what a
// dead one left: see the package doc).
func (b *Backend) client(ctx context.Context) (*Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("keeper backend %s: closed: %w", b.cfg.Name, sandbox.ErrUnavailable)
	}
	if b.c != nil {
		select {
		case <-b.c.Done():
			b.c.Close()
			b.c = nil
		default:
			return b.c, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dialBound)
	defer cancel()
	c, err := Dial(ctx, b.cfg.Dir)
	if errors.Is(err, ErrKeeperGone) {
		if _, serr := Start(b.cfg); serr != nil && !errors.Is(serr, ErrKeeperRunning) {
			return nil, fmt.Errorf("starting the keeper of %s: %w", b.cfg.Dir, serr)
		}
		c, err = Dial(ctx, b.cfg.Dir)
	}
	if err != nil {
		return nil, err
	}
	if c.Backend() != b.cfg.Name {
		c.Close()
		return nil, fmt.Errorf("the keeper of %s serves backend %q, not %q: %w", b.cfg.Dir, c.Backend(), b.cfg.Name, ErrProtocol)
	}
	b.c = c
	return c, nil
}

// Running reports whether a keeper answers on the directory now, without
// starting one.
func (b *Backend) Running(ctx context.Context) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.c != nil {
		select {
		case <-b.c.Done():
		default:
			return true
		}
	}
	c, err := Dial(ctx, b.cfg.Dir)
	if err != nil {
		return false
	}
	b.c = c
	return true
}

// Start starts spec's process in the keeper. The spec is validated here
// as by any backend, although the keeper keeps the spill files in its own
// directory rather than spec.Output.SpillDir.
func (b *Backend) Start(ctx context.Context, spec sandbox.ProcessSpec) (sandbox.Handle, error) {
	if err := spec.ValidateTerminal(); err != nil { // the keeper's backend is local
		return nil, err
	}
	c, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	st, err := c.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return b.newHandle(c, st.Ref, st.PID, spec.Stdin.Mode == sandbox.StdinOpen), nil
}

// Attach re-opens a process of the keeper from its Ref; an unknown one
// is ErrNotFound. Its stdin is offered whatever the spawn asked: the
// caller knows (it journaled the mode), and the keeper refuses writes to
// a stdin that is not open with ErrClosed.
func (b *Backend) Attach(ctx context.Context, ref sandbox.Ref) (sandbox.Handle, error) {
	c, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	st, ok := b.fromSnapshot(ref)
	if !ok {
		if st, err = c.Inspect(ctx, ref); err != nil {
			return nil, err
		}
	}
	if st.Phase == sandbox.PhaseMissing {
		return nil, fmt.Errorf("keeper process %s: %w", ref.ID, sandbox.ErrNotFound)
	}
	return b.newHandle(c, st.Ref, st.PID, true), nil
}

// fromSnapshot is ref's status from a recent List, if it is there.
func (b *Backend) fromSnapshot(ref sandbox.Ref) (Status, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ref.Backend != b.cfg.Name || time.Since(b.listedAt) > snapshotTTL {
		return Status{}, false
	}
	st, ok := b.listed[ref.ID]
	return st, ok
}

// Inspect reports the phase; Exit.Lost says a keeper died under it.
func (b *Backend) Inspect(ctx context.Context, ref sandbox.Ref) (sandbox.Inspection, error) {
	c, err := b.client(ctx)
	if err != nil {
		return sandbox.Inspection{}, err
	}
	st, err := c.Inspect(ctx, ref)
	if err != nil {
		return sandbox.Inspection{}, err
	}
	in := sandbox.Inspection{Phase: st.Phase}
	if st.Exit != nil {
		x := seamExit(*st.Exit)
		in.Exit = &x
	}
	return in, nil
}

// Cleanup removes an exited process's records and spill files.
func (b *Backend) Cleanup(ctx context.Context, ref sandbox.Ref) error {
	c, err := b.client(ctx)
	if err != nil {
		return err
	}
	return c.Cleanup(ctx, ref)
}

// List names every process the keeper holds. With no keeper running it
// starts none: a keeper's directory without a keeper holds no live
// process, and the next keeper recovers its records.
func (b *Backend) List(ctx context.Context) ([]sandbox.Ref, error) {
	if !b.Running(ctx) {
		return nil, nil
	}
	c, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	sts, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Ref, len(sts))
	snap := make(map[string]Status, len(sts))
	for i, st := range sts {
		out[i] = st.Ref
		snap[st.Ref.ID] = st
	}
	b.mu.Lock()
	b.listed, b.listedAt = snap, time.Now()
	b.mu.Unlock()
	return out, nil
}

// Close lets go of the keeper; the Backend then refuses every call. With
// stopAll the keeper stops every process (graceful, then forced) and
// exits. Without, a keeper that holds no running process exits too (there
// is nothing to keep), and one that does runs on for the next daemon.
func (b *Backend) Close(ctx context.Context, stopAll bool) error {
	running := b.Running(ctx)
	b.mu.Lock()
	c := b.c
	b.c, b.closed = nil, true
	b.mu.Unlock()
	if !running || c == nil {
		return nil // no keeper: a dead one's records wait for the next
	}
	defer c.Close()
	// Pinned before the shutdown, while the connection proves the keeper
	// alive: a keeper that exits gives its pid back only after this.
	fd, pinned := procfs.OpenPidfd(c.KeeperPID(), 0)
	if pinned {
		defer unix.Close(fd)
	}
	err := c.Shutdown(ctx, stopAll)
	if !stopAll && errors.Is(err, sandbox.ErrRunning) {
		return nil // kept for the next daemon
	}
	if err == nil && pinned {
		// The keeper exits after its reply; a daemon that said "stopped"
		// leaves no keeper behind it (bounded by ctx).
		bound := keeperExitBound
		if dl, ok := ctx.Deadline(); ok {
			bound = max(0, min(bound, time.Until(dl))) // a spent context: one look, no wait
		}
		if !procfs.AwaitPidfd(fd, bound) {
			return fmt.Errorf("keeper %d of %s: still running %v after its shutdown: %w", c.KeeperPID(), b.cfg.Dir, bound, sandbox.ErrRunning)
		}
	}
	return err
}

// keeperExitBound bounds Close's wait for a shut-down keeper to exit: it
// has stopped its processes before replying, so only its own teardown
// (flushing records, closing connections) remains.
const keeperExitBound = 10 * time.Second

// seamExit is the seam's form of a keeper's exit.
func seamExit(x Exit) sandbox.Exit {
	e := x.Exit
	e.Lost = x.Reason == ReasonKeeperLost
	return e
}

// handle is one attachment to a keeper's process. Its logs and stdin go
// to the keeper over the client it was made with; its Wait follows the
// process across a keeper's death (the next keeper reports the loss).
type handle struct {
	b     *Backend
	ref   sandbox.Ref
	pid   int
	logs  [2]*RemoteLog
	stdin sandbox.StdinPipe

	ctx    context.Context // ended by Release
	cancel context.CancelFunc
	once   sync.Once // settle: the first of Wait's and Terminate's answers
	done   chan struct{}
	exit   sandbox.Exit
	err    error

	wmu      sync.Mutex
	watchers []*procWatcher // Watch (watch.go)
}

// settle records the process's end once and closes done: a Terminate
// that got the exit settles the handle at once, so Done is closed when
// Terminate returns, as with an in-process handle.
func (h *handle) settle(x sandbox.Exit, err error) {
	h.once.Do(func() {
		h.exit, h.err = x, err
		close(h.done)
		h.notifyWatchers()
	})
}

func (b *Backend) newHandle(c *Client, ref sandbox.Ref, pid int, stdin bool) *handle {
	h := &handle{b: b, ref: ref, pid: pid, done: make(chan struct{})}
	h.logs = [2]*RemoteLog{c.Log(ref, Stdout), c.Log(ref, Stderr)}
	if stdin {
		h.stdin = &remoteStdin{h: h}
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	go h.waitLoop()
	return h
}

func (h *handle) Ref() sandbox.Ref { return h.ref }
func (h *handle) PID() int         { return h.pid }
func (h *handle) Stdout() sandbox.Log {
	return h.logs[0]
}
func (h *handle) Stderr() sandbox.Log { return h.logs[1] }
func (h *handle) Stdin() sandbox.StdinPipe {
	return h.stdin
}
func (h *handle) Done() <-chan struct{} { return h.done }

// waitLoop follows the process until it settles. With the client's feed
// it parks nothing: it registers feedExit, which settles the handle with
// the exit the feed reports (or runs waitLoop again when the connection
// ends), and returns, so a live process costs no goroutine here. Against
// a keeper without the feed it waits in the keeper. When the keeper goes
// away it reconnects, starting a new keeper, which answers with the
// keeper-lost exit; only if no keeper can be reached for lostBound is the
// attachment lost (ErrUnavailable).
func (h *handle) waitLoop() {
	select {
	case <-h.done:
		return // Terminate settled it
	default:
	}
	deadline := time.Now().Add(lostBound)
	backoff := 10 * time.Millisecond
	for {
		c, err := h.b.client(h.ctx)
		if err == nil {
			registered, known := c.hub.onExit(h.ref.ID, h.feedExit)
			if registered || h.settleFrom(known) {
				return
			}
		}
		if err == nil {
			var x Exit
			if x, err = c.Wait(h.ctx, h.ref); err == nil {
				h.settle(seamExit(x), nil)
				return
			}
		}
		switch {
		case h.ctx.Err() != nil:
			h.settle(sandbox.Exit{}, h.released())
			return
		case errors.Is(err, sandbox.ErrNotFound):
			h.settle(sandbox.Exit{}, fmt.Errorf("keeper process %s: %w: %w", h.ref.ID, sandbox.ErrUnavailable, err))
			return
		case time.Now().After(deadline):
			h.settle(sandbox.Exit{}, fmt.Errorf("keeper process %s: no keeper for %v: %w", h.ref.ID, lostBound, err))
			return
		}
		select {
		case <-h.ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// feedExit is the feed's report of the process (hub.onExit): with the
// recorded exit it settles the handle on the spot, which saves the wait
// round trip a settle cost after every exit and the log_state of each
// later read of a stream's end; else (removed, the connection ended, a
// keeper whose feed carries no exit) it follows the process as waitLoop
// does. It runs on the feed's goroutine, so it must not block.
func (h *handle) feedExit(pc *procChange) {
	if !h.settleFrom(pc) {
		go h.waitLoop()
	}
}

// settleFrom settles the handle with the exit a feed state carries, its
// streams' final state noted first (a reader of a settled handle's logs
// then needs no round trip for it). False: the state carries no exit.
func (h *handle) settleFrom(pc *procChange) bool {
	if pc == nil || !pc.Exited || pc.Exit == nil {
		return false
	}
	h.logs[0].noteFinal(pc.Stdout)
	h.logs[1].noteFinal(pc.Stderr)
	h.settle(seamExit(pc.Exit.exit()), nil)
	return true
}

func (h *handle) Wait(ctx context.Context) (sandbox.Exit, error) {
	select {
	case <-h.done:
		return h.exit, h.err
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
}

func (h *handle) Signal(sig syscall.Signal) error {
	ctx, cancel := context.WithTimeout(h.ctx, opBound)
	defer cancel()
	c, err := h.b.client(ctx)
	if err != nil {
		return err
	}
	return c.Signal(ctx, h.ref, sig)
}

func (h *handle) Terminate(ctx context.Context, mode sandbox.TerminateMode) (sandbox.Exit, error) {
	c, err := h.b.client(ctx)
	if err != nil {
		return sandbox.Exit{}, err
	}
	x, err := c.Terminate(ctx, h.ref, mode)
	if err != nil {
		return sandbox.Exit{}, err
	}
	h.settle(seamExit(x), nil)
	return seamExit(x), nil
}

// Stats asks the keeper; an unreachable keeper measures nothing.
func (h *handle) Stats() sandbox.Stats {
	ctx, cancel := context.WithTimeout(h.ctx, opBound)
	defer cancel()
	c, err := h.b.client(ctx)
	if err != nil {
		return sandbox.Stats{}
	}
	st, _ := c.Stats(ctx, h.ref)
	return st
}

// Release drops the attachment; the process runs on in the keeper. The
// handle settles at once (as a wait parked in the keeper would, when its
// context ended): waiting through the feed parks nothing to cancel.
func (h *handle) Release() error {
	h.cancel()
	h.settle(sandbox.Exit{}, h.released())
	return nil
}

func (h *handle) released() error {
	return fmt.Errorf("keeper process %s: attachment released: %w", h.ref.ID, sandbox.ErrUnavailable)
}

// remoteStdin is the stdin of a keeper's process.
type remoteStdin struct {
	h      *handle
	closed atomic.Bool
}

func (s *remoteStdin) Write(ctx context.Context, p []byte) (int, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("stdin: %w", sandbox.ErrClosed)
	}
	c, err := s.h.b.client(ctx)
	if err != nil {
		return 0, err
	}
	n, err := c.WriteStdin(ctx, s.h.ref, p)
	if errors.Is(err, sandbox.ErrClosed) || (err != nil && n > 0) {
		s.closed.Store(true) // closed there, or torn: never written again
	}
	return n, err
}

func (s *remoteStdin) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.h.ctx, opBound)
	defer cancel()
	c, err := s.h.b.client(ctx)
	if err != nil {
		return err
	}
	return c.CloseStdin(ctx, s.h.ref)
}

func (s *remoteStdin) IsClosed() bool { return s.closed.Load() }

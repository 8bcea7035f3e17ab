package keeper

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/bwrap"
	"github.com/capsule-host/capsule-host/sandbox/local"
	"github.com/capsule-host/capsule-host/sandbox/oci"
)

// Config configures Serve and Start.
type Config struct {
	// Dir is the state directory (absolute): socket, lock, log, and one
	// directory per process with its records and spill files.
	Dir string
	// Name is the backend name in the refs the keeper issues ("keeper").
	Name string
	// FrameTimeout bounds the hello and how long the rest of a frame may
	// take once its first byte arrived (default 10 s).
	FrameTimeout time.Duration
	// WriteTimeout bounds writing one frame to a client (default 30 s).
	WriteTimeout time.Duration
	// StartTimeout bounds how long Start waits for the keeper to listen
	// (default 30 s).
	StartTimeout time.Duration
	// NewBackend makes the embedded backend (default: the local backend).
	// Serve only: a keeper started by Start uses the default.
	NewBackend func() (sandbox.Backend, error)
	// Bwrap, when set, makes the embedded backend bubblewrap (with these
	// options) instead of the local backend; Start passes it on.
	Bwrap *bwrap.Options
	// OCI, when set, makes the embedded backend OCI (with these options):
	// the keeper then holds each container's stdio, which the container's
	// monitor does not. Start passes it on.
	OCI *oci.Options
	// NoCgroups gives the default backend local.Options.NoCgroups: for
	// tests of the no-cgroup path, where only the session identifies a
	// dead keeper's orphans.
	NoCgroups bool
	// SyncEach makes each exit record durable alone (fsync of the file,
	// then of its directory), as before the group commit: the baseline
	// BenchmarkShutdown measures the group commit against, never for
	// production. Start passes it on; CAPSULE_KEEPER_SYNC_EACH=1 in the
	// starter's environment sets it (the benchmark's daemon starts the
	// keeper, so only the environment reaches it).
	SyncEach bool
	// Ready is called once the socket listens (Serve only).
	Ready func()
	// Logf logs the keeper's decisions (default: package log, to stderr,
	// which Start points at <dir>/keeper.log).
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	c.SyncEach = c.SyncEach || os.Getenv("CAPSULE_KEEPER_SYNC_EACH") == "1"
	if c.Name == "" {
		c.Name = "keeper"
	}
	if c.FrameTimeout <= 0 {
		c.FrameTimeout = 10 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	switch {
	case c.NewBackend != nil:
	case c.OCI != nil:
		opts := *c.OCI
		opts.Name = c.Name
		c.NewBackend = func() (sandbox.Backend, error) { return oci.New(opts) }
	case c.Bwrap != nil:
		opts := *c.Bwrap
		opts.Name, opts.NoCgroups = c.Name, opts.NoCgroups || c.NoCgroups
		opts.Multiplex = true
		c.NewBackend = func() (sandbox.Backend, error) { return bwrap.New(opts) }
	default:
		// Multiplex: a live process costs the keeper its pipes and no
		// goroutine, pidfd or thread (RFC §16).
		opts := local.Options{NoCgroups: c.NoCgroups, Multiplex: true}
		c.NewBackend = func() (sandbox.Backend, error) { return local.New(opts) }
	}
	if c.Logf == nil {
		c.Logf = log.New(os.Stderr, fmt.Sprintf("keeper[%d] ", os.Getpid()), log.LstdFlags|log.Lmicroseconds).Printf
	}
	return c
}

// Limits of one keeper. A connection beyond maxInflight gets ErrBusy
// instead of stalling its reader (it could then never send a cancel);
// data-carrying operations share maxHeavy slots across all clients, which
// bounds the memory of reads and writes in flight (about 10 MiB each).
const (
	maxInflight = 4096
	maxHeavy    = 8
	stopSlack   = 30 * time.Second
)

type server struct {
	cfg     Config
	procs   string
	backend sandbox.Backend
	logf    func(format string, args ...any)

	// startMu: starts hold it shared, stopping takes it exclusively, so
	// no start slips past a shutdown unterminated.
	startMu  sync.RWMutex
	stopping bool

	mu     sync.Mutex
	table  map[string]*entry
	conns  map[*conn]struct{}
	connWG sync.WaitGroup

	feed   feed         // what changed, for watch_all
	commit *groupCommit // makes exit records durable in batches

	heavy    chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
}

// Serve runs a keeper on cfg.Dir until ctx ends or a client asks for
// shutdown; when ctx ends every process is stopped first (graceful, then
// forced), so nothing is left without an owner. It refuses a directory
// another keeper holds (*LockedError naming its PID).
//
// Order matters: the lock first (nobody else may touch the records),
// then the records of a dead predecessor (kill its orphans while their
// recorded PIDs and start times still identify them), then the embedded
// backend (local.New makes this process the child subreaper and sweeps
// the cgroups of dead hosts, which catches the orphans that left their
// session), and only then the socket.
func Serve(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := prepareDir(cfg.Dir); err != nil {
		return err
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	s := &server{cfg: cfg, procs: filepath.Join(cfg.Dir, procsName), logf: cfg.Logf,
		table: map[string]*entry{}, conns: map[*conn]struct{}{},
		heavy: make(chan struct{}, maxHeavy), quit: make(chan struct{})}
	if s.commit, err = newGroupCommit(s.procs); err != nil {
		return err
	}
	if err := s.recoverAll(); err != nil {
		return err
	}
	if s.backend, err = cfg.NewBackend(); err != nil {
		return fmt.Errorf("keeper backend: %w", err)
	}
	ln, err := listen(cfg.Dir)
	if err != nil {
		return err
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	s.logf("serving %s (%d records recovered)", cfg.Dir, len(s.table))
	return s.run(ctx, ln)
}

func (s *server) run(ctx context.Context, ln *net.UnixListener) error {
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		s.accept(ln)
	}()
	select {
	case <-ctx.Done():
		s.logf("stopping: %v", context.Cause(ctx))
		s.stopAll()
	case <-s.quit:
	}
	ln.Close()
	<-accepted
	if err := os.Remove(filepath.Join(s.cfg.Dir, SocketName)); err != nil {
		s.logf("remove socket: %v", err)
	}
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	waited := make(chan struct{})
	go func() { s.connWG.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		s.logf("connections still busy after 5s; exiting anyway")
	}
	s.quiesce() // no client is left to start anything meanwhile
	s.logf("stopped")
	return nil
}

// quiescer is an embedded backend whose helpers outlive a process's exit
// by a moment (OCI's monitors delete the runtime's container after it).
type quiescer interface {
	Quiesce(ctx context.Context) error
}

// quiesce waits, bounded, for the backend's helpers before the keeper
// exits: once it is gone nothing it started writes into its state.
func (s *server) quiesce() {
	q, ok := s.backend.(quiescer)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopSlack)
	defer cancel()
	if err := q.Quiesce(ctx); err != nil {
		s.logf("backend helpers not all gone at exit: %v", err)
	}
}

func (s *server) accept(ln *net.UnixListener) {
	for {
		nc, err := ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// EMFILE and the like: back off instead of spinning.
			s.logf("accept: %v", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c := s.addConn(nc)
		go c.serve()
	}
}

func (s *server) addConn(nc *net.UnixConn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{s: s, nc: nc, ctx: ctx, cancel: cancel, inflight: map[uint64]context.CancelFunc{}}
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	return c
}

func (s *server) dropConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.connWG.Done()
}

func (s *server) isStopping() bool {
	s.startMu.RLock()
	defer s.startMu.RUnlock()
	return s.stopping
}

func (s *server) requestQuit() { s.quitOnce.Do(func() { close(s.quit) }) }

// running lists the processes that have not settled.
func (s *server) running() []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*entry
	for _, e := range s.table {
		if !e.exited() {
			out = append(out, e)
		}
	}
	return out
}

// stopAll refuses new starts and ends every process: SIGTERM with its
// grace, then SIGKILL, in parallel, and waits for the exit records.
func (s *server) stopAll() {
	s.startMu.Lock()
	s.stopping = true
	s.startMu.Unlock()
	var wg sync.WaitGroup
	for _, e := range s.running() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), e.grace+stopSlack)
			defer cancel()
			if _, err := e.h.Terminate(ctx, sandbox.Graceful); err != nil {
				e.h.Terminate(ctx, sandbox.Force)
			}
			select {
			case <-e.done:
			case <-ctx.Done():
				s.logf("process %s: not settled after stop", e.id)
			}
		}()
	}
	wg.Wait()
}

func (s *server) get(id string) (*entry, error) {
	s.mu.Lock()
	e := s.table[id]
	s.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("process %s: %w", id, sandbox.ErrNotFound)
	}
	return e, nil
}

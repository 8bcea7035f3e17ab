package registry

import (
	"context"
	"crypto/cipher"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
)

// owner is who a process belongs to. Fallback is part of the identity: an
// owner-fallback caller never shares processes, quotas or a workspace with
// a real principal that happens to have the same name.
type owner struct {
	capsule   string
	principal string
	fallback  bool
}

func (o owner) attrs() []any {
	p := o.principal
	if o.fallback {
		p = "(owner-fallback)" + p
	}
	return []any{"capsule", o.capsule, "principal", p}
}

// capsuleState is one registered capsule. It survives RegisterCapsule under
// the same name (reload/upgrade): only the policy is swapped.
type capsuleState struct {
	name    string
	policy  CapsulePolicy
	exec    map[string]bool // allowed executables, symlinks resolved
	literal map[string]bool // the same entries as written (for "not found")
	entries int             // persistent entries, all principals
	// adopted: a placeholder made by Adopt for processes of a capsule not
	// (yet) registered; it has no policy and spawns nothing until
	// RegisterCapsule gives it one.
	adopted bool
}

// scope is the per-(capsule, principal) state: counters and the event log.
type scope struct {
	own      owner
	seqLimit uint64 // with a journal: the first seq not yet reserved in it
	running  int    // both tiers
	retained int    // persistent entries, live or exited-unreleased
	events   []evRec
	nextSeq  uint64 // seq of the next event; starts at 1
	notify   chan struct{}
}

type evRec struct {
	ev Event
	p  *proc
}

// proc is one process, either tier. Fields below mu-guarded are only
// touched under Registry.mu; the rest are set before publication.
type proc struct {
	key        procKey
	id         string // the wire ID (persistent); never logged
	own        owner
	persistent bool
	label      string
	command    string
	args       []string // argv after the command, for the operator's view
	backend    sandbox.Backend
	overflow   sandbox.Overflow
	keepStdin  bool
	sc         *scope
	cs         *capsuleState
	stdinSem   chan struct{} // serialises writers so frames never interleave
	rearm      chan struct{} // wakes the watcher when a log-ready was consumed
	cb         *cbWatch      // callback watch (watch.go); nil: a goroutine watches; set under mu
	term       *termState    // a terminal's screen (terminal.go); nil: pipes

	// guarded by Registry.mu
	h           sandbox.Handle // nil while starting
	started     time.Time
	lastTouch   time.Time
	maxLifetime time.Duration
	idle        time.Duration
	retention   time.Duration
	reason      Reason
	reasonSet   bool
	exited      bool
	recorded    chan struct{} // closed once the exit's slots and journal are settled
	exit        Exit
	exitAt      time.Time
	forgotten   bool
	pending     [2]bool   // a log-ready event per stream is unconsumed
	pendingSeq  [2]uint64 // its seq
	stats       sandbox.Stats
	statsAt     time.Time // wall clock of the last backend read
	touchedJr   time.Time // the last touch written to the journal
	detached    bool      // left running for the next daemon (Detach)
	dirHeld     dirHold   // what it holds in the directory (directory.go)

	spillLogged [2]atomic.Bool // a spill failure of the stream was logged
}

func (p *proc) log(s Stream) sandbox.Log {
	if s == Stderr {
		return p.h.Stderr()
	}
	return p.h.Stdout()
}

// spillLoss takes a read's error: a spill failure (the disk is full or
// failing) is not the reader's error, because the chunk beside it is
// good and counts what was lost as dropped bytes; it is logged once per
// stream. Any other error is returned.
func (r *Registry) spillLoss(p *proc, s Stream, err error) error {
	if err == nil || !errors.Is(err, sandbox.ErrSpill) {
		return err
	}
	if !p.spillLogged[s&1].Swap(true) {
		r.log.Error("output spill failed: readers get the loss counted as bytes dropped", append(p.attrs(), "stream", s, "err", err)...)
	}
	return nil
}

func (p *proc) attrs() []any { return append(p.own.attrs(), "proc", p.key.short()) }

type tombstone struct {
	own   owner
	until time.Time
}

// Registry is the host's one process registry: ownership, quotas, reaping,
// cursors and events above the sandbox seam.
type Registry struct {
	cfg      Config
	log      *slog.Logger
	hashKey  [32]byte // blake2b key for ID → map key
	macKey   [32]byte // blake2b key for cursor tokens
	sealer   cipher.AEAD
	jr       *journal.Journal // nil: nothing is durable
	dir      Directory        // never nil: LocalDirectory by default
	dirHash  [32]byte         // keys DirProcess.Key (Config.DirectoryKey)
	holders  holderCache      // other nodes' processes this node forwarded to
	relayMu  sync.Mutex
	relays   map[owner]*relayState // events_relay.go
	dedup    *spawnDedup           // forwarded spawns answered once (spawn_dedup.go)
	now      func() time.Time
	ownState bool // StateDir was created by New and is removed by Shutdown

	mu       sync.Mutex
	closed   bool
	capsules map[string]*capsuleState
	scopes   map[owner]*scope
	byKey    map[procKey]*proc  // persistent processes, by keyed hash of the ID
	all      map[*proc]struct{} // every process, both tiers, starting included
	tombs    map[procKey]tombstone
	running  int // processes of both tiers holding a concurrent slot on this node (Config.NodeCapacity)

	workers    sync.WaitGroup // watchers and reaper-started terminations
	wq         watchQueue     // callback-watched processes to check (watch.go)
	inflight   sync.WaitGroup // spawns between reservation and publication
	reaperStop chan struct{}
	reaperDone chan struct{}
}

// New returns a registry with cfg's zero fields defaulted, and starts its
// reaper.
func New(cfg Config) (*Registry, error) {
	cfg = cfg.withDefaults()
	r := &Registry{
		cfg:        cfg,
		jr:         cfg.Journal,
		log:        cfg.Logger,
		now:        time.Now,
		capsules:   map[string]*capsuleState{},
		scopes:     map[owner]*scope{},
		byKey:      map[procKey]*proc{},
		all:        map[*proc]struct{}{},
		tombs:      map[procKey]tombstone{},
		dedup:      newSpawnDedup(),
		reaperStop: make(chan struct{}),
		reaperDone: make(chan struct{}),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.dir = cfg.Directory; r.dir == nil {
		r.dir = NewLocalDirectory()
	}
	if err := r.setKeys(cfg.Keys); err != nil {
		return nil, err
	}
	r.dirHash = r.hashKey
	if cfg.DirectoryKey != nil {
		r.dirHash = *cfg.DirectoryKey
	}
	if r.cfg.StateDir == "" {
		d, err := os.MkdirTemp("", "capsule-registry-")
		if err != nil {
			return nil, fmt.Errorf("%w: registry state dir: %v", ErrUnavailable, err)
		}
		r.cfg.StateDir, r.ownState = d, true
	} else {
		if !filepath.IsAbs(r.cfg.StateDir) {
			return nil, fmt.Errorf("%w: StateDir %q must be absolute", ErrInvalidInput, r.cfg.StateDir)
		}
		if err := os.MkdirAll(r.cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("%w: registry state dir: %v", ErrUnavailable, err)
		}
	}
	go r.reapLoop()
	return r, nil
}

// Backend returns the configured backend of that name, or nil.
func (r *Registry) Backend(name string) sandbox.Backend { return r.cfg.Backends[name] }

// RegisterCapsule adds or replaces (reload, upgrade) a capsule's policy.
// Replacing keeps the capsule's processes: the new policy applies to new
// calls only.
func (r *Registry) RegisterCapsule(name string, p CapsulePolicy) error {
	if err := validCapsuleName(name); err != nil {
		return err
	}
	if !filepath.IsAbs(p.Workspace) {
		return fmt.Errorf("%w: capsule %q: workspace %q must be an absolute path", ErrInvalidInput, name, p.Workspace)
	}
	if p.Backend == "" {
		p.Backend = "local"
	}
	if p.OutputRate < 0 {
		return fmt.Errorf("%w: capsule %q: output rate %d must be >= 0", ErrInvalidInput, name, p.OutputRate)
	}
	if p.ExecRoot != "" && !filepath.IsAbs(p.ExecRoot) {
		return fmt.Errorf("%w: capsule %q: exec root %q must be an absolute path", ErrInvalidInput, name, p.ExecRoot)
	}
	exec, literal := map[string]bool{}, map[string]bool{}
	for _, e := range p.Exec {
		if !filepath.IsAbs(e) {
			return fmt.Errorf("%w: capsule %q: exec entry %q must be an absolute path", ErrInvalidInput, name, e)
		}
		literal[filepath.Clean(e)] = true
		if p.ExecRoot != "" {
			if res, err := rootExecutable(p.ExecRoot, p.ExecHidden, filepath.Clean(e)); err == nil {
				exec[rootExecKey(res, e)] = true
			} else {
				r.log.Warn("exec entry is not an executable of the sandbox's root filesystem; it allows nothing until it is", "capsule", name, "exec", e, "root", p.ExecRoot, "err", err)
			}
			continue
		}
		if res, err := filepath.EvalSymlinks(e); err == nil {
			exec[rootExecKey(res, e)] = true // (file, name): see resolveExec
		} else {
			r.log.Warn("exec entry does not resolve; it allows nothing until it exists", "capsule", name, "exec", e, "err", err)
		}
	}
	p.Exec = append([]string(nil), p.Exec...)
	p.ExecHidden = append([]string(nil), p.ExecHidden...)
	if p.WorkspaceOwner != nil {
		o := *p.WorkspaceOwner
		p.WorkspaceOwner = &o
	}
	p.Env = append([]string(nil), p.Env...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("%w: registry is shut down", ErrUnavailable)
	}
	if cs := r.capsules[name]; cs != nil {
		cs.policy, cs.exec, cs.literal, cs.adopted = p, exec, literal, false
		r.log.Info("capsule reloaded: processes kept, new policy applies to new calls", "capsule", name, "entries", cs.entries)
		return nil
	}
	r.capsules[name] = &capsuleState{name: name, policy: p, exec: exec, literal: literal}
	r.log.Info("capsule registered", "capsule", name)
	return nil
}

// RemoveCapsule stops and forgets every process of the capsule (reason
// removed), both tiers. Idempotent.
func (r *Registry) RemoveCapsule(ctx context.Context, name string) error {
	r.mu.Lock()
	_, had := r.capsules[name]
	delete(r.capsules, name)
	for o := range r.scopes {
		if o.capsule == name {
			delete(r.scopes, o)
		}
	}
	victims := r.collectLocked(func(p *proc) bool { return p.own.capsule == name }, ReasonRemoved)
	r.mu.Unlock()
	n := r.stopAll(ctx, victims)
	if had || n > 0 {
		r.log.Info("capsule removed", "capsule", name, "stopped", n)
	}
	return nil
}

// EvictPrincipal stops and forgets every process of a principal in every
// capsule (reason evicted), both tiers.
func (r *Registry) EvictPrincipal(ctx context.Context, principal string) error {
	if err := ValidPrincipal(principal); err != nil {
		return err
	}
	r.mu.Lock()
	victims := r.collectLocked(func(p *proc) bool { return !p.own.fallback && p.own.principal == principal }, ReasonEvicted)
	r.mu.Unlock()
	n := r.stopAll(ctx, victims)
	r.log.Info("principal evicted", "principal", principal, "stopped", n)
	return nil
}

// Shutdown stops everything (reason removed), waits for the registry's
// goroutines and stops the reaper. Later calls fail with ErrUnavailable.
func (r *Registry) Shutdown(ctx context.Context) error { return r.shutdown(ctx, false) }

// Detach shuts the registry down like Shutdown, except that persistent
// processes that outlive the daemon (journaled, on a backend whose refs
// are LifetimeBackend: the keeper's, OCI's) keep running and keep their
// journal records, for the next daemon's Adopt; exited ones not yet
// released keep their records too (keepable). Everything else is
// stopped (reason removed).
func (r *Registry) Detach(ctx context.Context) error { return r.shutdown(ctx, true) }

func (r *Registry) shutdown(ctx context.Context, keep bool) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	var kept []*proc
	victims := r.collectLocked(func(p *proc) bool {
		if keep && r.keepable(p) {
			p.detached = true // its watcher records no exit for it
			kept = append(kept, p)
			return false
		}
		return true
	}, ReasonRemoved)
	r.mu.Unlock()
	close(r.reaperStop)
	<-r.reaperDone
	r.inflight.Wait() // spawns in flight see closed and kill their own process
	for _, p := range kept {
		p.h.Release()
	}
	n := r.stopAll(ctx, victims)
	done := make(chan struct{})
	go func() { r.workers.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("%w: shutdown: waiting for process watchers", ctxErr(ctx, "shutdown"))
	}
	if r.ownState && err == nil {
		os.RemoveAll(r.cfg.StateDir)
	}
	if keep {
		r.log.Info("registry detached: persistent processes kept for the next daemon, the rest stopped (reason removed)", "kept", len(kept), "stopped", n)
	} else {
		r.log.Info("registry shut down: every process stopped (reason removed), reaper stopped", "stopped", n)
	}
	return err
}

// collectLocked claims reason for every matching process and returns them.
// Starting processes are claimed too: their spawner sees the claim and
// kills what it started.
func (r *Registry) collectLocked(match func(*proc) bool, reason Reason) []*proc {
	var out []*proc
	for p := range r.all {
		if match(p) {
			r.claimLocked(p, reason)
			out = append(out, p)
		}
	}
	return out
}

// claimLocked records why a process is being ended; the first claim wins
// (the reap ladder). It reports whether this claim won.
func (r *Registry) claimLocked(p *proc, reason Reason) bool {
	if p.reasonSet || p.exited {
		return false
	}
	p.reason, p.reasonSet = reason, true
	return true
}

// stopAll terminates processes in parallel (graceful, then forced), then
// forgets them, with the journal's writes coalesced. It returns how many
// were stopped.
func (r *Registry) stopAll(ctx context.Context, ps []*proc) int {
	if r.jr != nil && len(ps) > 1 {
		defer r.jr.Coalesce()() // their exits and deletions share fsyncs
	}
	var wg sync.WaitGroup
	n := 0
	for _, p := range ps {
		r.mu.Lock()
		h := p.h
		r.mu.Unlock()
		if h == nil {
			continue // starting: its spawner kills it
		}
		n++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.terminate(ctx, p, r.cfg.Defaults.StopGrace); err != nil {
				r.log.Error("terminate failed", append(p.attrs(), "err", err)...)
			}
			r.recordExit(p)
			r.forget(p)
		}()
	}
	wg.Wait()
	return n
}

// terminate ends p's tree: SIGTERM and up to grace, then SIGKILL. The
// forced step runs even if ctx is done, bounded on its own.
func (r *Registry) terminate(ctx context.Context, p *proc, grace time.Duration) (sandbox.Exit, error) {
	if grace > 0 {
		gctx, cancel := context.WithTimeout(ctx, grace)
		ex, err := p.h.Terminate(gctx, sandbox.Graceful)
		cancel()
		if err == nil {
			return ex, nil
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forceTerminateBound+r.cfg.Defaults.Drain)
	defer cancel()
	return p.h.Terminate(fctx, sandbox.Force)
}

// recordExit stores p's exit once it has settled, frees its concurrent
// slot and emits the exited event. Idempotent.
func (r *Registry) recordExit(p *proc) {
	r.mu.Lock()
	done := p.exited || p.h == nil || p.detached
	rec := p.recorded
	r.mu.Unlock()
	if done {
		awaitRecorded(rec)
		return
	}
	select {
	case <-p.h.Done():
	default:
		return // not settled: the watcher records it
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ex, err := p.h.Wait(ctx)
	cancel()
	var e Exit
	if err == nil && !(ex.Lost && ex.Signal == 0) {
		e = ExitFrom(ex) // a lost process found already dead: status unknown
	}
	r.mu.Lock()
	if p.exited || p.detached {
		rec := p.recorded
		r.mu.Unlock()
		awaitRecorded(rec)
		return
	}
	p.exited, p.exit, p.exitAt = true, e, r.now()
	rec = make(chan struct{})
	p.recorded = rec
	defer close(rec)
	if !p.reasonSet {
		p.reason, p.reasonSet = lostOr(ex.Lost, ReasonSelfExit), true
	}
	p.sc.running--
	r.running--
	if p.persistent && !p.forgotten {
		r.pushLocked(p.sc, evRec{ev: Event{ID: p.id, Kind: EventExited, Exit: e, Reason: p.reason}, p: p})
	}
	reason, exitAt := p.reason, p.exitAt
	r.mu.Unlock()
	r.dirRelease(p, holdRunning)
	r.journalExit(p, e, ex, exitAt, reason)
	if st := p.h.Stdin(); st != nil {
		st.Close()
	}
	attrs := append(p.attrs(), "reason", reason.String())
	if ex.Lost {
		attrs = append(attrs, "keeper_lost", true)
	}
	if err != nil {
		r.log.Warn("process exit unknown: backend lost it", append(attrs, "err", err)...)
	} else {
		if ex.KilledFor != "" {
			attrs = append(attrs, "killed_for", string(ex.KilledFor))
		}
		r.log.Info("process exited", append(attrs, "code", ex.Code, "signal", int(ex.Signal))...)
	}
}

// recordBound bounds how long a second recorder of one exit waits for the
// first: the directory release and the journal write are bounded each.
const recordBound = 2*dirBound + 5*time.Second

// awaitRecorded waits until the exit another caller is recording has
// returned its slots, so that whoever returns after recordExit (a
// run-to-completion spawn, wait) sees the quota it took given back, in
// the directory too, not a moment later. nil: nothing is being recorded.
func awaitRecorded(rec chan struct{}) {
	if rec == nil {
		return
	}
	t := time.NewTimer(recordBound)
	defer t.Stop()
	select {
	case <-rec:
	case <-t.C:
	}
}

// forget drops p from the registry (its ID then resolves to nothing),
// frees its retained slot and cleans up its backend resources. The owner
// keeps a tombstone so release stays idempotent.
func (r *Registry) forget(p *proc) {
	r.mu.Lock()
	if p.forgotten {
		r.mu.Unlock()
		return
	}
	r.forgetLocked(p)
	r.mu.Unlock()
	r.cleanup(p)
}

func (r *Registry) forgetLocked(p *proc) {
	p.forgotten = true
	delete(r.all, p)
	if p.persistent {
		delete(r.byKey, p.key)
		p.sc.retained--
		p.cs.entries--
		r.tombs[p.key] = tombstone{own: p.own, until: r.now().Add(exitRetentionCeil)}
	}
}

// cleanup releases the backend's resources of an exited process.
func (r *Registry) cleanup(p *proc) {
	r.dirRelease(p, holdRetained|holdPublished)
	r.journalForget(p)
	if p.h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p.backend == nil {
		return // a lost process: nothing of it is left anywhere
	}
	if err := p.backend.Cleanup(ctx, p.h.Ref()); err != nil {
		r.log.Warn("backend cleanup failed", append(p.attrs(), "err", err)...)
	}
	if err := p.h.Release(); err != nil {
		r.log.Warn("backend release failed", append(p.attrs(), "err", err)...)
	}
}

// scopeLocked returns (creating) the scope of o.
func (r *Registry) scopeLocked(o owner) *scope {
	sc := r.scopes[o]
	if sc == nil {
		sc = &scope{own: o, nextSeq: 1, notify: make(chan struct{})}
		r.scopes[o] = sc
	}
	return sc
}

// sortProcs orders processes by start time (stable list output).
func sortProcs(ps []*proc) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].started.Before(ps[j].started) })
}

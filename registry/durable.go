package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
)

// What makes persistent processes durable across daemons: the journal
// (Config.Journal), persisted keys (Config.Keys), and Adopt. Without a
// journal every function here is a no-op.

const (
	// seqBlock is how many event seqs one journal write reserves: one
	// fsync per block, and after a crash the unused rest is skipped.
	seqBlock = 1024
	// adoptWorkers attach journaled processes in parallel on restart.
	adoptWorkers = 16
	// adoptBound bounds one attach during Adopt.
	adoptBound = 30 * time.Second
)

// setKeys installs k, or fresh random keys when k is nil.
func (r *Registry) setKeys(k *Keys) error {
	var keys Keys
	if k != nil {
		keys = *k
	} else {
		for _, b := range [][]byte{keys.Hash[:], keys.MAC[:], keys.Seal[:]} {
			if _, err := rand.Read(b); err != nil {
				return fmt.Errorf("%w: registry keys: %v", ErrInternal, err)
			}
		}
	}
	r.hashKey, r.macKey = keys.Hash, keys.MAC
	aead, err := chacha20poly1305.NewX(keys.Seal[:])
	if err != nil {
		return fmt.Errorf("%w: registry seal key: %v", ErrInternal, err)
	}
	r.sealer = aead
	return nil
}

// sealID encrypts id for its journal record, bound to its key (a sealed
// ID moved to another record does not open).
func (r *Registry) sealID(k procKey, id string) ([]byte, error) {
	nonce := make([]byte, r.sealer.NonceSize(), r.sealer.NonceSize()+len(id)+r.sealer.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("%w: sealing an ID: %v", ErrInternal, err)
	}
	return r.sealer.Seal(nonce, nonce, []byte(id), k[:]), nil
}

// openID is sealID's inverse; the ID must hash back to k.
func (r *Registry) openID(k procKey, sealed []byte) (string, error) {
	n := r.sealer.NonceSize()
	if len(sealed) < n+r.sealer.Overhead() {
		return "", fmt.Errorf("sealed ID is %d bytes, too short", len(sealed))
	}
	id, err := r.sealer.Open(nil, sealed[:n], sealed[n:], k[:])
	if err != nil {
		return "", fmt.Errorf("sealed ID does not open with this state directory's key: %v", err)
	}
	if r.keyOf(string(id)) != k {
		return "", fmt.Errorf("sealed ID does not hash to its record's key")
	}
	return string(id), nil
}

func jOwner(o owner) journal.Owner {
	return journal.Owner{Capsule: o.capsule, Principal: o.principal, Fallback: o.fallback}
}

var (
	jStdin    = map[sandbox.StdinMode]journal.StdinMode{sandbox.StdinClosed: journal.StdinClosed, sandbox.StdinBytes: journal.StdinBytes, sandbox.StdinOpen: journal.StdinOpen}
	jOverflow = map[sandbox.Overflow]journal.Overflow{sandbox.DropOldest: journal.DropOldest, sandbox.Backpressure: journal.Backpressure}
	jLifetime = map[sandbox.Lifetime]journal.Lifetime{sandbox.LifetimeHandle: journal.LifetimeHandle, sandbox.LifetimeBackend: journal.LifetimeBackend}
	// sLifetime is jLifetime reversed.
	sLifetime = map[journal.Lifetime]sandbox.Lifetime{journal.LifetimeHandle: sandbox.LifetimeHandle, journal.LifetimeBackend: sandbox.LifetimeBackend}
	// jReasons maps the journal's reason names back.
	jReasons = func() map[journal.Reason]Reason {
		m := map[journal.Reason]Reason{}
		for i := range reasonNames {
			m[journal.Reason(reasonNames[i])] = Reason(i)
		}
		return m
	}()
)

// journalSpawn writes a persistent spawn's record before its ID leaves
// the registry: a daemon that dies after this finds the process; one that
// dies before it never returned the ID, and Adopt ends the process the
// backend holds without a record.
func (r *Registry) journalSpawn(p *proc, pr *prepared, ref sandbox.Ref, now time.Time) error {
	if r.jr == nil || !p.persistent {
		return nil
	}
	sealed, err := r.sealID(p.key, p.id)
	if err != nil {
		return err
	}
	rec := journal.Process{
		Key: journal.Key(p.key), Owner: jOwner(p.own), Label: p.label, Command: p.command, Args: pr.spec.Argv[1:],
		Backend:   journal.BackendRef{Name: ref.Backend, ID: ref.ID, Lifetime: jLifetime[ref.Lifetime]},
		Limits:    journal.Limits(pr.spec.Limits),
		Stdin:     jStdin[pr.spec.Stdin.Mode],
		Overflow:  jOverflow[pr.spec.Output.Overflow],
		RingBytes: pr.spec.Output.RingBytes,
		Started:   now, LifetimeDeadline: now.Add(p.maxLifetime),
		IdleTimeout: p.idle, IdleDeadline: now.Add(p.idle),
		ExitRetention: p.retention,
		SealedID:      sealed,
		Terminal:      jTerminal(pr.spec.Terminal),
	}
	if err := r.jr.PutProcess(rec); err != nil {
		return fmt.Errorf("%w: journaling the spawn: %v", ErrUnavailable, err)
	}
	return nil
}

// journalExit records how a persistent process ended; its retention
// deadline then counts from the exit, across restarts.
func (r *Registry) journalExit(p *proc, e Exit, ex sandbox.Exit, at time.Time, reason Reason) {
	if r.jr == nil || !p.persistent {
		return
	}
	if !ex.At.IsZero() {
		at = ex.At
	}
	je := journal.Exit{Code: e.Code, Signal: e.Signal, KilledFor: string(ex.KilledFor), At: at}
	if err := r.jr.UpdateExit(journal.Key(p.key), je, journal.Reason(reason.String())); err != nil {
		r.log.Warn("journal: recording the exit failed; a restart would see the process as lost", append(p.attrs(), "err", err)...)
	}
}

// journalForget deletes a forgotten process's record.
func (r *Registry) journalForget(p *proc) {
	if r.jr == nil || !p.persistent {
		return
	}
	if err := r.jr.DeleteProcess(journal.Key(p.key)); err != nil {
		r.log.Warn("journal: deleting the record failed; a restart would adopt it again", append(p.attrs(), "err", err)...)
	}
}

// touchEvery is how far the journaled idle deadline may lag the real one:
// each touch is an fsync, so owner calls move it at most this often (a
// restart may reap up to this much early).
func touchEvery(idle time.Duration) time.Duration {
	return max(time.Second, min(idle/16, 30*time.Second))
}

// touchDueLocked says whether an owner call at now should move the
// journaled idle deadline, and claims that write.
func (r *Registry) touchDueLocked(p *proc, now time.Time) bool {
	if r.jr == nil || !p.persistent || now.Sub(p.touchedJr) < touchEvery(p.idle) {
		return false
	}
	p.touchedJr = now
	return true
}

func (r *Registry) journalTouch(p *proc, now time.Time) {
	if err := r.jr.Touch(journal.Key(p.key), now); err != nil {
		r.log.Warn("journal: touch failed", append(p.attrs(), "err", err)...)
	}
}

// reserveSeqLocked makes sure sc.nextSeq is reserved in the journal, so
// no seq is handed out twice across a crash.
func (r *Registry) reserveSeqLocked(sc *scope) {
	if r.jr == nil || sc.nextSeq < sc.seqLimit {
		return
	}
	o := jOwner(sc.own)
	if err := r.jr.SetSeq(o, sc.nextSeq); err != nil {
		r.log.Warn("journal: event sequence not reserved; seqs may repeat after a crash", append(sc.own.attrs(), "err", err)...)
		return
	}
	first, err := r.jr.ReserveSeq(o, seqBlock)
	if err != nil {
		r.log.Warn("journal: event sequence not reserved; seqs may repeat after a crash", append(sc.own.attrs(), "err", err)...)
		return
	}
	sc.nextSeq, sc.seqLimit = max(sc.nextSeq, first), first+seqBlock
}

// keepable says whether Detach can leave p to the next daemon: a
// journaled persistent process on a backend whose refs outlive the daemon
// (the keeper's, OCI's). Exited ones too, until they are released: a
// kill -9 leaves their record, exit and output to the next daemon, and a
// graceful keep must not lose more than a crash (RFC §16), or an ID the
// guest holds would point nowhere after an upgrade.
func (r *Registry) keepable(p *proc) bool {
	return r.jr != nil && p.persistent && p.h != nil && p.h.Ref().Lifetime == sandbox.LifetimeBackend
}

// AdoptReport is what Adopt found in the journal and the backends.
type AdoptReport struct {
	// Running processes re-attached; Exited ones whose exit was known
	// (before or during the downtime: their exited events are delivered).
	Running, Exited int
	// Lost: journaled processes their backend no longer has (its keeper
	// died). They read as exited with reason removed, the 1.1.0 mapping.
	Lost int
	// Unreadable: records whose ID could not be opened; they are dropped.
	Unreadable int
	// Orphans: processes a backend held with no journal record (a spawn
	// cut off by a crash before it was journaled); terminated.
	Orphans int
	Took    time.Duration
}

// Adopt takes back what an earlier daemon on the same journal left: it
// restores each scope's event sequence, re-attaches every journaled
// process through its backend (deadlines are absolute, so the downtime
// counts), and terminates what a backend holds without a record. Call it
// once, after the capsules are registered and before the first call is
// served; a capsule not registered yet gets a placeholder that keeps its
// processes owned until it is. It is PrepareAdopt then Finish.
func (r *Registry) Adopt(ctx context.Context) (AdoptReport, error) {
	return r.PrepareAdopt(ctx).Finish(ctx)
}

// Adoption is an Adopt in two halves, so a daemon can attach while its
// capsules compile: PrepareAdopt does the slow part that needs no capsule
// (the journal read, one attach per record through the keepers, the
// orphan sweep) and publishes nothing; Finish, once the capsules are
// registered, restores the scopes' seqs and publishes every process.
// Until Finish nothing adopted is visible, so nothing a capsule's load
// does (a failed load unregisters its capsule, stopping its processes)
// can reach an adopted process.
type Adoption struct {
	r     *Registry
	err   error
	rep   AdoptReport
	procs []pendingProc
	took  time.Duration
}

// pendingProc is one attached, unpublished process.
type pendingProc struct {
	p    *proc
	term *journal.Terminal
}

// PrepareAdopt is Adopt's first half (see Adoption). Call Finish, or
// Abandon when the start fails, exactly once.
func (r *Registry) PrepareAdopt(ctx context.Context) *Adoption {
	start := time.Now()
	a := &Adoption{r: r}
	if r.jr == nil {
		return a
	}
	var recs []journal.Process
	if err := r.jr.ForEachProcess(func(p journal.Process) error { recs = append(recs, p); return nil }); err != nil {
		a.err = fmt.Errorf("%w: reading the journal's processes: %v", ErrUnavailable, err)
		return a
	}
	held := r.listHeld(ctx) // first: a listing backend attaches from its list
	known := r.attachAll(ctx, recs, a)
	a.rep.Orphans = r.endOrphans(ctx, held, known)
	a.took = time.Since(start)
	return a
}

// Finish is Adopt's second half: restore each scope's seq, publish every
// attached process (starting its watcher), log the report.
func (a *Adoption) Finish(ctx context.Context) (AdoptReport, error) {
	r := a.r
	if r.jr == nil {
		r.dirAdoptDone(ctx)
		return a.rep, nil
	}
	if a.err != nil {
		a.Abandon()
		return a.rep, a.err
	}
	start := time.Now()
	if err := r.jr.ForEachScope(func(o journal.Owner, next uint64) error {
		r.mu.Lock()
		sc := r.scopeLocked(owner{capsule: o.Capsule, principal: o.Principal, fallback: o.Fallback})
		sc.nextSeq, sc.seqLimit = max(sc.nextSeq, next), next
		r.mu.Unlock()
		return nil
	}); err != nil {
		a.Abandon()
		return a.rep, fmt.Errorf("%w: reading the journal's scopes: %v", ErrUnavailable, err)
	}
	for _, pp := range a.procs {
		pp.p.term = r.adoptTerminal(pp.p, pp.term)
		r.publishAdopted(pp.p)
	}
	a.procs = nil
	rep := a.rep
	rep.Took = a.took + time.Since(start)
	r.log.Info("journal adopted", "running", rep.Running, "exited", rep.Exited, "lost", rep.Lost,
		"unreadable", rep.Unreadable, "orphans_terminated", rep.Orphans, "took", rep.Took)
	r.dirAdoptDone(ctx)
	return rep, nil
}

// Abandon releases what PrepareAdopt attached without publishing it (a
// start that fails): the processes stay with their backends, as a
// Detach leaves them.
func (a *Adoption) Abandon() {
	for _, pp := range a.procs {
		pp.p.h.Release()
	}
	a.procs = nil
}

// dirAdoptDone tells the directory the adoption is complete. A failure
// is logged, not fatal: the earlier counts stay (an upper bound) and the
// keep-alive loop rewrites them.
func (r *Registry) dirAdoptDone(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, dirBound)
	defer cancel()
	if err := r.dir.AdoptDone(ctx); err != nil {
		r.log.Warn("directory: adopted counts not yet written (the earlier ones hold until they are)", "err", err)
	}
}

// attachAll attaches recs in parallel into a and returns the refs they
// hold.
func (r *Registry) attachAll(ctx context.Context, recs []journal.Process, a *Adoption) map[sandbox.Ref]bool {
	known := make(map[sandbox.Ref]bool, len(recs))
	var mu sync.Mutex
	work := make(chan journal.Process)
	var wg sync.WaitGroup
	for range min(adoptWorkers, max(1, len(recs))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rec := range work {
				p, outcome := r.attachOne(ctx, rec)
				mu.Lock()
				known[refOf(rec)] = true
				if p != nil {
					a.procs = append(a.procs, pendingProc{p: p, term: rec.Terminal})
				}
				switch outcome {
				case adoptedRunning:
					a.rep.Running++
				case adoptedExited:
					a.rep.Exited++
				case adoptedLost:
					a.rep.Lost++
				case adoptUnreadable:
					a.rep.Unreadable++
				}
				mu.Unlock()
			}
		}()
	}
	for _, rec := range recs {
		work <- rec
	}
	close(work)
	wg.Wait()
	return known
}

func refOf(rec journal.Process) sandbox.Ref {
	return sandbox.Ref{Backend: rec.Backend.Name, ID: rec.Backend.ID, Lifetime: sLifetime[rec.Backend.Lifetime]}
}

type adoptOutcome int

const (
	adoptedRunning adoptOutcome = iota
	adoptedExited
	adoptedLost
	adoptUnreadable
)

// backendFor is the backend that holds a journaled ref: the persistent
// one of that name, else the ordinary one.
func (r *Registry) backendFor(name string) sandbox.Backend {
	if b := r.cfg.Persistent[name]; b != nil {
		return b
	}
	return r.cfg.Backends[name]
}

// attachJournaled attaches a journaled ref through backendFor. A ref the
// persistent backend does not know may be one an older daemon wrote
// before that backend had a keeper (OCI containers were held by their
// monitors alone): the ordinary backend of the name is asked next, so
// the process is owned (and ended or served), never left running unowned.
func (r *Registry) attachJournaled(ctx context.Context, name string, ref sandbox.Ref) (sandbox.Backend, sandbox.Handle, error) {
	be := r.backendFor(name)
	if be == nil {
		return nil, nil, fmt.Errorf("backend %q is not configured", name)
	}
	h, err := be.Attach(ctx, ref)
	if plain := r.cfg.Backends[name]; errors.Is(err, sandbox.ErrNotFound) && plain != nil && plain != be {
		if ph, perr := plain.Attach(ctx, ref); perr == nil {
			return plain, ph, nil
		}
	}
	return be, h, err
}

// attachOne re-attaches one journaled process, unpublished (nil: the
// record was unreadable and is dropped).
func (r *Registry) attachOne(ctx context.Context, rec journal.Process) (*proc, adoptOutcome) {
	k := procKey(rec.Key)
	id, err := r.openID(k, rec.SealedID)
	if err != nil {
		r.log.Error("journal: record dropped: its ID cannot be recovered", "proc", k.short(), "err", err)
		r.jr.DeleteProcess(rec.Key)
		return nil, adoptUnreadable
	}
	o := owner{capsule: rec.Owner.Capsule, principal: rec.Owner.Principal, fallback: rec.Owner.Fallback}
	p := &proc{
		key: k, id: id, own: o, persistent: true, label: rec.Label, command: rec.Command, args: rec.Args,
		overflow: sandbox.DropOldest, keepStdin: rec.Stdin == journal.StdinOpen,
		stdinSem: make(chan struct{}, 1), rearm: make(chan struct{}, 1),
		started: rec.Started, lastTouch: rec.IdleDeadline.Add(-rec.IdleTimeout),
		maxLifetime: rec.LifetimeDeadline.Sub(rec.Started), idle: rec.IdleTimeout, retention: rec.ExitRetention,
	}
	p.touchedJr = p.lastTouch
	if rec.Overflow == journal.Backpressure {
		p.overflow = sandbox.Backpressure
	}
	ref := refOf(rec)
	outcome := adoptedRunning
	actx, cancel := context.WithTimeout(ctx, adoptBound)
	p.backend, p.h, err = r.attachJournaled(actx, rec.Backend.Name, ref)
	cancel()
	if err != nil {
		r.log.Warn("journaled process lost: its backend does not hold it (keeper gone?); it reads as exited, reason removed",
			append(o.attrs(), "proc", k.short(), "backend", rec.Backend.Name, "err", err)...)
		p.h = lostHandle(ref, rec.Exit)
		outcome = adoptedLost
	}
	if rec.Exit != nil {
		p.exited, p.exitAt = true, rec.Exit.At
		p.exit = Exit{Code: rec.Exit.Code, Signal: rec.Exit.Signal}
		p.reason, p.reasonSet = jReasons[rec.Reason], true
		if outcome == adoptedRunning {
			outcome = adoptedExited
		}
	} else if outcome == adoptedLost {
		p.reason, p.reasonSet = ReasonRemoved, true
	}
	return p, outcome
}

// publishAdopted enters an adopted process in the maps and counters and
// starts its watcher, which records an exit that happened meanwhile
// (with its exited event).
func (r *Registry) publishAdopted(p *proc) {
	r.mu.Lock()
	cs := r.capsules[p.own.capsule]
	if cs == nil {
		cs = &capsuleState{name: p.own.capsule, adopted: true}
		r.capsules[p.own.capsule] = cs
	}
	p.cs, p.sc = cs, r.scopeLocked(p.own)
	cs.entries++
	p.sc.retained++
	if !p.exited {
		p.sc.running++
		r.running++
	}
	r.byKey[p.key] = p
	r.all[p] = struct{}{}
	r.workers.Add(1)
	r.mu.Unlock()
	r.dirAdopt(p)
	r.startWatch(p)
}

// heldRef is a process a listing backend holds.
type heldRef struct {
	be  sandbox.Backend
	ref sandbox.Ref
}

// listHeld lists every listing backend's processes once.
func (r *Registry) listHeld(ctx context.Context) []heldRef {
	seen := map[sandbox.Lister]bool{}
	var out []heldRef
	for _, m := range []map[string]sandbox.Backend{r.cfg.Persistent, r.cfg.Backends} {
		for name, be := range m {
			l, ok := be.(sandbox.Lister)
			if !ok || seen[l] {
				continue
			}
			seen[l] = true
			refs, err := l.List(ctx)
			if err != nil {
				r.log.Error("adopt: listing the backend's processes failed; unjournaled ones may run on", "backend", name, "err", err)
				continue
			}
			for _, ref := range refs {
				out = append(out, heldRef{be: be, ref: ref})
			}
		}
	}
	return out
}

// endOrphans terminates what a backend held without a journal record,
// and cleans it up.
func (r *Registry) endOrphans(ctx context.Context, held []heldRef, known map[sandbox.Ref]bool) int {
	n := 0
	for _, h := range held {
		if !known[h.ref] && r.endOrphan(ctx, h.be, h.ref) {
			n++
		}
	}
	return n
}

func (r *Registry) endOrphan(ctx context.Context, be sandbox.Backend, ref sandbox.Ref) bool {
	ctx, cancel := context.WithTimeout(ctx, forceTerminateBound+r.cfg.Defaults.Drain)
	defer cancel()
	h, err := be.Attach(ctx, ref)
	if err != nil {
		r.log.Warn("adopt: an unjournaled process could not be attached", "backend", ref.Backend, "ref", ref.ID, "err", err)
		return false
	}
	defer h.Release()
	if _, err := h.Terminate(ctx, sandbox.Force); err != nil {
		r.log.Error("adopt: terminating an unjournaled process failed", "backend", ref.Backend, "ref", ref.ID, "err", err)
		return false
	}
	if err := be.Cleanup(ctx, ref); err != nil {
		r.log.Warn("adopt: cleaning up an unjournaled process failed", "backend", ref.Backend, "ref", ref.ID, "err", err)
	}
	r.log.Warn("adopt: process without a journal record terminated (its spawn was cut off before its ID was returned)",
		"backend", ref.Backend, "ref", ref.ID, "pid", h.PID())
	return true
}

// lostOr is the reason of an exit nobody claimed: a process its backend
// lost (its keeper died) maps onto 1.1.0's removed ("the host ended
// it"), the only frozen reason that does not blame the process or the
// caller.
func lostOr(lost bool, r Reason) Reason {
	if lost {
		return ReasonRemoved
	}
	return r
}

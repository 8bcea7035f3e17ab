package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// maxStatusMany bounds one status-many call.
const maxStatusMany = 1024

// resolve finds the caller's live entry for id and refreshes its idle
// clock. Every failure — no caller aside — is the same ErrNoSuchProcess
// value: unknown, malformed, released, reaped, another principal's or
// another capsule's ID cannot be told apart. A malformed ID is hashed and
// looked up like any other so it costs the same.
func (r *Registry) resolve(ctx context.Context, id string) (*proc, time.Duration, error) {
	o, err := r.caller(ctx)
	if err != nil {
		return nil, 0, err
	}
	k := r.keyOf(id)
	r.mu.Lock()
	p := r.byKey[k]
	if p == nil && !r.closed {
		r.mu.Unlock()
		return nil, 0, r.remoteHolder(ctx, o, id)
	}
	if p == nil || p.own != o || p.forgotten || r.closed {
		r.mu.Unlock()
		return nil, 0, ErrNoSuchProcess
	}
	now := r.now()
	idle := now.Sub(p.lastTouch)
	p.lastTouch = now
	due := r.touchDueLocked(p, now)
	r.mu.Unlock()
	if due {
		r.journalTouch(p, now)
	}
	return p, idle, nil
}

// syncExit records the exit now if the process has settled but its
// watcher has not caught up, so no caller sees "running" after the end.
func (r *Registry) syncExit(p *proc) {
	select {
	case <-p.h.Done():
		r.recordExit(p)
	default:
	}
}

// statsTTL bounds how often a process's CPU/memory figures are read from
// the backend (a cgroup read costs ~20 µs): status polling and a
// list of many processes stay cheap, and figures are at most this stale.
const statsTTL = 250 * time.Millisecond

// cachedStats is p's figures from the backend and whether they are
// fresher than statsTTL (then nobody asks the backend again).
func (r *Registry) cachedStats(p *proc) (sandbox.Stats, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return p.stats, !p.statsAt.IsZero() && time.Since(p.statsAt) < statsTTL
}

// noteStats caches a fresh read of p's figures. A figure once known is
// kept when a later read cannot produce it (the cgroup of an exited
// process is gone): the last measurement beats none, and none is never
// turned into a made-up zero.
func (r *Registry) noteStats(p *proc, fresh sandbox.Stats) sandbox.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fresh.CPUTime == nil {
		fresh.CPUTime = p.stats.CPUTime
	}
	if fresh.MemoryPeak == nil {
		fresh.MemoryPeak = p.stats.MemoryPeak
	}
	p.stats, p.statsAt = fresh, time.Now()
	return fresh
}

// figures is figuresOf for one process (Status): through the backend's
// Snapshotter where it has one, which is one keeper round trip instead of
// one per log figure (four, ~0.9 ms of a shell read_process_logs).
func (r *Registry) figures(p *proc) sandbox.Snapshot {
	return r.figuresOf(context.Background(), []*proc{p})[0]
}

// info snapshots p. idle is the time since the previous owner call.
func (r *Registry) info(p *proc, idle time.Duration, operator bool) Info {
	return r.infoOf(p, r.figures(p), idle, operator)
}

// infoOf is p's Info with the backend's figures s.
func (r *Registry) infoOf(p *proc, s sandbox.Snapshot, idle time.Duration, operator bool) Info {
	r.syncExit(p)
	st := s.Stats
	in := Info{
		ID:            p.id,
		Node:          r.nodeName(),
		Label:         p.label,
		Command:       p.command,
		Phase:         PhaseRunning,
		BufferedBytes: uint64(s.Stdout.Retained + s.Stderr.Retained),
		BytesDropped:  uint64(s.Stdout.Dropped + s.Stderr.Dropped),
		CPU:           st.CPUTime,
	}
	if st.MemoryPeak != nil && *st.MemoryPeak >= 0 {
		v := uint64(*st.MemoryPeak)
		in.MemPeak = &v
	}
	if s := p.h.Stdin(); s != nil {
		in.StdinOpen = !s.IsClosed()
	}
	if operator {
		in.Capsule, in.Principal, in.Args = p.own.capsule, p.own.principal, p.args
	}
	r.mu.Lock()
	in.Age, in.Idle = r.now().Sub(p.started), idle
	if operator {
		in.Idle = r.now().Sub(p.lastTouch)
	}
	if p.exited {
		in.Phase = PhaseExited
		e, reason := p.exit, p.reason
		in.Exit, in.Reason = &e, &reason
		in.StdinOpen = false
	} else {
		in.ReapIn, in.ReapRule = r.reapDeadlineLocked(p)
	}
	r.mu.Unlock()
	if in.Phase == PhaseRunning {
		if pid := p.h.PID(); pid > 0 {
			v := uint32(pid)
			in.OSPid = &v
		}
	}
	infoTerminal(p, &in)
	return in
}

// Attach returns a handle on a persistent process for this instance.
// Dropping it detaches; it never kills.
func (r *Registry) Attach(ctx context.Context, id string) (*Handle, error) {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Handle{r: r, p: p, own: p.own, attached: true}, nil
}

// List returns the caller's processes whose label contains labelFilter.
// It never drains. It does not refresh idle clocks (it names no process).
func (r *Registry) List(ctx context.Context, labelFilter *string) ([]Info, error) {
	o, err := r.caller(ctx)
	if err != nil {
		return nil, err
	}
	var ps []*proc
	r.mu.Lock()
	for _, p := range r.byKey {
		if p.own == o && (labelFilter == nil || strings.Contains(p.label, *labelFilter)) {
			ps = append(ps, p)
		}
	}
	sortProcs(ps)
	now := r.now()
	idles := make([]time.Duration, len(ps))
	for i, p := range ps {
		idles[i] = now.Sub(p.lastTouch)
	}
	r.mu.Unlock()
	snaps := r.figuresOf(ctx, ps)
	out := make([]Info, len(ps))
	for i, p := range ps {
		out[i] = r.infoOf(p, snaps[i], idles[i], false)
	}
	return r.listElsewhere(ctx, o, labelFilter, out)
}

// listElsewhere adds the caller's processes other nodes hold (cluster
// mode with forwarding; not for a forwarded list). A holder that cannot
// be reached fails the list with unavailable naming it: a list silently
// missing processes would read as "they are gone".
func (r *Registry) listElsewhere(ctx context.Context, o owner, labelFilter *string, out []Info) ([]Info, error) {
	if r.cfg.Forwarder == nil || ctx.Value(noForwardKey{}) != nil {
		return out, nil
	}
	nodes, err := r.dir.Holders(ctx, dirScope(o))
	if err != nil {
		return nil, err
	}
	c, _ := CallerFrom(ctx)
	for _, n := range nodes {
		raw, err := r.cfg.Forwarder.Forward(ctx, n, RemoteCall{Op: OpList, Caller: c, Label: labelFilter})
		if err != nil {
			return nil, fmt.Errorf("list-processes: node %q: %w", n, err)
		}
		var more []Info
		if err := json.Unmarshal(raw, &more); err != nil {
			return nil, fmt.Errorf("%w: node %q answered list with %v", ErrInternal, n, err)
		}
		out = append(out, more...)
	}
	if len(nodes) > 0 {
		sort.SliceStable(out, func(i, j int) bool { return out[i].Age > out[j].Age }) // oldest first, as on one node
	}
	return out, nil
}

// Status returns one process's snapshot; it never drains.
func (r *Registry) Status(ctx context.Context, id string) (Info, error) {
	p, idle, err := r.resolve(ctx, id)
	if err != nil {
		return forwardAs[Info](ctx, r, err, RemoteCall{Op: OpStatus, ID: id})
	}
	in := r.info(p, idle, false)
	sampleInput(&in)
	return in, nil
}

// StatusMany is Status for many IDs; unknown IDs are simply absent.
func (r *Registry) StatusMany(ctx context.Context, ids []string) ([]Info, error) {
	if _, err := r.caller(ctx); err != nil {
		return nil, err
	}
	if len(ids) > maxStatusMany {
		return nil, fmt.Errorf("%w: status-many: %d IDs (max %d)", ErrTooLarge, len(ids), maxStatusMany)
	}
	out := make([]Info, 0, len(ids))
	for _, id := range ids {
		p, idle, err := r.resolve(ctx, id)
		if err == nil {
			out = append(out, r.info(p, idle, false))
		} else if in, ferr := forwardAs[Info](ctx, r, err, RemoteCall{Op: OpStatus, ID: id}); ferr == nil && errors.As(err, new(*HeldElsewhereError)) {
			out = append(out, in) // held by another node: asked there
		}
	}
	return out, nil
}

// ReadSince reads one stream from a cursor token without draining.
func (r *Registry) ReadSince(ctx context.Context, id string, s Stream, cursor *string, max uint32) (LogChunk, error) {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		return forwardAs[LogChunk](ctx, r, err, RemoteCall{Op: OpReadSince, ID: id, Stream: s, Cursor: cursor, Max: max})
	}
	return r.readSince(p, s, cursor, max)
}

// readSince: nil cursor is the start of the stream; a token that this
// registry did not issue for this process and stream is ErrNoSuchProcess
// (the contract makes a malformed cursor indistinguishable from a bad
// ID). For a backpressure process the read acknowledges everything up to
// the returned cursor, so the process can continue: any read-since reader
// counts as "a reader caught up".
func (r *Registry) readSince(p *proc, s Stream, cursor *string, max uint32) (LogChunk, error) {
	if s != Stdout && s != Stderr {
		return LogChunk{}, fmt.Errorf("%w: read-since: unknown stream %d", ErrInvalidInput, s)
	}
	if max == 0 {
		return LogChunk{}, fmt.Errorf("%w: read-since: max-bytes must be > 0", ErrInvalidInput)
	}
	var off int64
	if cursor != nil {
		o, ok := r.decodeCursor(p.key, s, *cursor)
		if !ok {
			return LogChunk{}, ErrNoSuchProcess
		}
		off = o
	}
	l := p.log(s)
	c, err := l.ReadFrom(off, min(int(max), r.cfg.Defaults.ReadMax))
	if err = r.spillLoss(p, s, err); err != nil {
		return LogChunk{}, r.readErr(p, "read-since", err)
	}
	if p.overflow == sandbox.Backpressure {
		l.Ack(c.Next)
	}
	return LogChunk{Data: c.Data, Next: r.encodeCursor(p.key, s, c.Next), BytesDropped: uint64(c.Dropped), EOF: c.EOF, Times: logTimes(c)}, nil
}

// logTimes makes a chunk's marks relative to its Data.
func logTimes(c sandbox.Chunk) []LogTime {
	if len(c.Marks) == 0 {
		return nil
	}
	start := c.Next - int64(len(c.Data))
	out := make([]LogTime, 0, len(c.Marks))
	for _, m := range c.Marks {
		out = append(out, LogTime{At: int(max(m.Off-start, 0)), UnixNano: m.Time})
	}
	return out
}

// readErr maps a read's error. A log removed by the cleanup of a release
// or a reap that raced this read (the process resolved, then forgotten
// before its log was read) is the process being gone: no-such-process,
// as the read would have answered a moment later, not a lost backend.
func (r *Registry) readErr(p *proc, op string, err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		r.mu.Lock()
		gone := p.forgotten
		r.mu.Unlock()
		if gone {
			return ErrNoSuchProcess
		}
	}
	return mapSandboxErr(op, err)
}

// ReadLogs drains both streams through the process's drain cursor.
func (r *Registry) ReadLogs(ctx context.Context, id string) (Logs, error) {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		return Logs{}, err
	}
	return r.readLogs(p)
}

func (r *Registry) readLogs(p *proc) (Logs, error) {
	// Exit state first: if it has exited, its logs are complete, so the
	// drain below sees every byte and "running=false" never hides a tail.
	r.syncExit(p)
	var lg Logs
	r.mu.Lock()
	lg.Running = !p.exited
	if p.exited {
		e := p.exit
		lg.Exit = &e
	}
	r.mu.Unlock()
	for _, s := range []Stream{Stdout, Stderr} {
		c, err := p.log(s).Drain(r.cfg.Defaults.ReadMax)
		if err = r.spillLoss(p, s, err); err != nil {
			return Logs{}, r.readErr(p, "read-logs", err)
		}
		lg.BytesDropped += uint64(c.Dropped)
		if s == Stdout {
			lg.Stdout = c.Data
		} else {
			lg.Stderr = c.Data
		}
	}
	return lg, nil
}

// WriteStdin writes all of data or fails; see writeStdin.
func (r *Registry) WriteStdin(ctx context.Context, id string, data []byte) (int, error) {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		return forwardAs[int](ctx, r, err, RemoteCall{Op: OpWriteStdin, ID: id, Data: data})
	}
	return r.writeStdin(ctx, p, data)
}

// writeStdin: stdin must have been kept open (else ErrClosed). At most
// StdinWriteMax bytes. Writers are serialised so frames never interleave.
// The write is bounded by ctx and WaitCap so a non-reading process cannot
// pin an instance. A failure after n>0 bytes is a *TornWriteError and
// closes the stream (a half-written frame cannot be continued safely); a
// bound that passes before any byte went through is ErrWaitTimeout and
// leaves the stream open (nothing was torn). A write that blocked (did not complete within
// stdinBlockedAfter) emits stdin-drained when it completes.
func (r *Registry) writeStdin(ctx context.Context, p *proc, data []byte) (int, error) {
	if len(data) > r.cfg.Defaults.StdinWriteMax {
		return 0, fmt.Errorf("%w: write-stdin: %d bytes (max %d per call)", ErrTooLarge, len(data), r.cfg.Defaults.StdinWriteMax)
	}
	st := p.h.Stdin()
	if st == nil || !p.keepStdin {
		return 0, fmt.Errorf("%w: stdin is not open: the process was not started with keep-stdin-open or by spawn-background", ErrClosed)
	}
	if st.IsClosed() {
		return 0, fmt.Errorf("%w: stdin is closed", ErrClosed)
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Defaults.WaitCap)
	defer cancel()
	select {
	case p.stdinSem <- struct{}{}:
	case <-wctx.Done():
		return 0, ctxErr(wctx, "write-stdin: waiting for another writer")
	}
	defer func() { <-p.stdinSem }()
	if len(data) == 0 {
		return 0, nil
	}
	var blocked atomic.Bool
	t := time.AfterFunc(stdinBlockedAfter, func() { blocked.Store(true) })
	n, err := st.Write(wctx, data)
	t.Stop()
	if err != nil {
		if n > 0 {
			st.Close() // a torn frame cannot be continued: close for good
		}
		var cause error
		if wctx.Err() != nil {
			cause = ctxErr(wctx, "write-stdin")
		} else {
			cause = mapSandboxErr("write-stdin", err)
		}
		r.log.Info("stdin write failed", append(p.attrs(), "written", n, "err", cause)...)
		if n > 0 {
			return n, &TornWriteError{Written: int64(n), Cause: cause}
		}
		return 0, cause
	}
	if blocked.Load() && p.persistent {
		r.emitStdinDrained(p)
	}
	return n, nil
}

// CloseStdin closes stdin. Idempotent (also when it was never open).
func (r *Registry) CloseStdin(ctx context.Context, id string) error {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		_, err = forwardAs[struct{}](ctx, r, err, RemoteCall{Op: OpCloseStdin, ID: id})
		return err
	}
	return r.closeStdin(p)
}

func (r *Registry) closeStdin(p *proc) error {
	if st := p.h.Stdin(); st != nil {
		st.Close()
	}
	return nil
}

// Signal sends sig to the process tree. SigKill is a forced terminate of
// the whole tree (reason killed). Other signals do not set a reason: if
// the process then exits, that is its own decision (self-exit).
func (r *Registry) Signal(ctx context.Context, id string, s Signal) error {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		_, err = forwardAs[struct{}](ctx, r, err, RemoteCall{Op: OpSignal, ID: id, Signal: s})
		return err
	}
	return r.signal(ctx, p, s)
}

func (r *Registry) signal(ctx context.Context, p *proc, s Signal) error {
	if s < SigTerm || s > SigKill {
		return fmt.Errorf("%w: unknown signal %d", ErrInvalidInput, s)
	}
	if s == SigKill {
		_, err := r.kill(ctx, p)
		return err
	}
	if err := p.h.Signal(s.Unix()); err != nil {
		return mapSandboxErr("signal", err)
	}
	return nil
}

func (r *Registry) kill(ctx context.Context, p *proc) (Exit, error) {
	r.mu.Lock()
	r.claimLocked(p, ReasonKilled)
	r.mu.Unlock()
	if _, err := r.terminate(ctx, p, 0); err != nil {
		return Exit{}, mapSandboxErr("kill", err)
	}
	return r.exitOf(p), nil
}

// exitOf records and returns the exit of a settled process.
func (r *Registry) exitOf(p *proc) Exit {
	r.recordExit(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	return p.exit
}

// Wait waits up to timeout (capped by WaitCap) for the exit.
func (r *Registry) Wait(ctx context.Context, id string, timeout time.Duration) (Exit, error) {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		return forwardAs[Exit](ctx, r, err, RemoteCall{Op: OpWait, ID: id, Timeout: timeout})
	}
	return r.wait(ctx, p, timeout)
}

func (r *Registry) wait(ctx context.Context, p *proc, timeout time.Duration) (Exit, error) {
	select {
	case <-p.h.Done():
		return r.exitOf(p), nil
	default:
	}
	t := time.NewTimer(max0(min(timeout, r.cfg.Defaults.WaitCap)))
	defer t.Stop()
	select {
	case <-p.h.Done():
		return r.exitOf(p), nil
	case <-t.C:
		return Exit{}, fmt.Errorf("%w: process still running", ErrWaitTimeout)
	case <-ctx.Done():
		return Exit{}, ctxErr(ctx, "wait")
	}
}

// Stop ends the process gracefully (SIGTERM, up to grace: default
// StopGrace, capped by StopGraceCap), then forcibly, and returns the exit.
// The ID stays resolvable (phase exited, reason stopped) until released or
// its exit retention passes.
func (r *Registry) Stop(ctx context.Context, id string, grace *time.Duration) (Exit, error) {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		return forwardAs[Exit](ctx, r, err, RemoteCall{Op: OpStop, ID: id, Grace: grace})
	}
	return r.stop(ctx, p, grace)
}

func (r *Registry) stop(ctx context.Context, p *proc, grace *time.Duration) (Exit, error) {
	g := r.cfg.Defaults.StopGrace
	if grace != nil {
		if *grace < 0 {
			return Exit{}, fmt.Errorf("%w: grace must be >= 0", ErrInvalidInput)
		}
		g = min(*grace, r.cfg.Defaults.StopGraceCap)
	}
	r.mu.Lock()
	r.claimLocked(p, ReasonStopped)
	r.mu.Unlock()
	if _, err := r.terminate(ctx, p, g); err != nil {
		return Exit{}, mapSandboxErr("stop", err)
	}
	r.log.Info("process stopped", p.attrs()...)
	return r.exitOf(p), nil
}

// Release forgets an exited process: its ID then gives ErrNoSuchProcess.
// ErrInvalidInput while it runs. Idempotent for the owner: releasing an
// ID the caller already released (or that was reaped by retention) is a
// success for the owner only; anyone else gets ErrNoSuchProcess.
func (r *Registry) Release(ctx context.Context, id string) error {
	o, err := r.caller(ctx)
	if err != nil {
		return err
	}
	k := r.keyOf(id)
	r.mu.Lock()
	p := r.byKey[k]
	if p == nil || p.own != o || p.forgotten || r.closed {
		t, ok := r.tombs[k]
		r.mu.Unlock()
		if ok && t.own == o {
			return nil
		}
		if p == nil && !ok {
			_, err := forwardAs[struct{}](ctx, r, r.remoteHolder(ctx, o, id), RemoteCall{Op: OpRelease, ID: id})
			return err
		}
		return ErrNoSuchProcess
	}
	p.lastTouch = r.now()
	r.mu.Unlock()
	return r.releaseExited(p, "process released")
}

// releaseExited forgets p if it has exited (ErrInvalidInput while it
// runs; nil when it is already forgotten) and logs msg.
func (r *Registry) releaseExited(p *proc, msg string) error {
	r.syncExit(p)
	r.mu.Lock()
	if !p.exited {
		r.mu.Unlock()
		return fmt.Errorf("%w: release: the process is running; stop it first", ErrInvalidInput)
	}
	if p.forgotten {
		r.mu.Unlock()
		return nil
	}
	r.forgetLocked(p)
	r.mu.Unlock()
	r.cleanup(p)
	r.log.Info(msg, p.attrs()...)
	return nil
}

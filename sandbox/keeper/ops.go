package keeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
)

type none struct{}

func (s *server) opStart(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[startArgs](raw)
	if err != nil {
		return nil, err
	}
	spec, err := a.Spec.spec()
	if err != nil {
		return nil, err
	}
	s.startMu.RLock()
	defer s.startMu.RUnlock()
	if s.stopping {
		return nil, fmt.Errorf("start: %w", ErrShuttingDown)
	}
	e, err := s.startEntry(ctx, spec)
	if err != nil {
		return nil, err
	}
	return startResult{Ref: e.id, PID: e.pid}, nil
}

// startEntry starts a process in its own directory. The keeper keeps the
// spill files there, whatever Output.SpillDir said: they must outlive the
// daemon that asked, and a later keeper must be able to find and remove
// them after a crash.
func (s *server) startEntry(ctx context.Context, spec sandbox.ProcessSpec) (*entry, error) {
	id := newID()
	d := filepath.Join(s.procs, id)
	if err := os.Mkdir(d, 0o700); err != nil {
		return nil, fmt.Errorf("keeper: process dir: %w: %w", sandbox.ErrUnavailable, err)
	}
	if spec.Output.SpillBytes > 0 {
		spec.Output.SpillDir = d
	}
	h, err := s.backend.Start(ctx, spec)
	if err != nil {
		os.RemoveAll(d)
		return nil, err
	}
	e := &entry{id: id, dir: d, pid: h.PID(), label: spec.Label, h: h, grace: spec.Grace, done: make(chan struct{})}
	e.logs = [2]Log{h.Stdout(), h.Stderr()}
	// The root is unreaped until it settles, so its PID cannot have been
	// reused yet unless it settled and the PID space wrapped in between.
	rec := procRecord{Version: recordVer, Ref: id, PID: e.pid, StartTick: procfs.StartTime(e.pid), Label: spec.Label, StartedAt: time.Now(), BackendRef: h.Ref().ID}
	if err := writeRecord(d, procFile, rec); err != nil {
		// Without its record a keeper crash would leave it unfindable.
		kctx, cancel := context.WithTimeout(context.Background(), stopSlack)
		defer cancel()
		h.Terminate(kctx, sandbox.Force)
		s.backend.Cleanup(kctx, h.Ref())
		os.RemoveAll(d)
		return nil, fmt.Errorf("keeper: %w: %w", sandbox.ErrUnavailable, err)
	}
	s.follow(e)
	return e, nil
}

func (s *server) opList(ctx context.Context, raw json.RawMessage) (any, error) {
	s.mu.Lock()
	out := listResult{Procs: make([]procInfo, 0, len(s.table))}
	for _, e := range s.table {
		out.Procs = append(out.Procs, e.status())
	}
	s.mu.Unlock()
	sort.Slice(out.Procs, func(i, j int) bool { return out.Procs[i].Ref < out.Procs[j].Ref })
	return out, nil
}

// opInspect answers PhaseMissing for an unknown ref, as the seam's Inspect.
func (s *server) opInspect(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[refArgs](raw)
	if err != nil {
		return nil, err
	}
	e, err := s.get(a.Ref)
	if errors.Is(err, sandbox.ErrNotFound) {
		return procInfo{Ref: a.Ref, Phase: sandbox.PhaseMissing.String()}, nil
	}
	return e.status(), nil
}

func (s *server) logOf(ref string, stream string) (Log, error) {
	e, err := s.get(ref)
	if err != nil {
		return nil, err
	}
	return e.log(Stream(stream))
}

func stateOf(l Log) LogState {
	return LogState{End: l.End(), Closed: l.Closed(), Dropped: l.Dropped(), Retained: l.Retained()}
}

// chunkAnswer answers a read or drain: the chunk, the log's state, and
// the error that OutputLog returns together with data (a spill failure).
type chunkAnswer struct {
	chunkResult
	Err *wireError `json:"err,omitempty"`
}

func (s *server) readOp(ctx context.Context, raw json.RawMessage, drain bool) (any, error) {
	a, err := decode[logArgs](raw)
	if err != nil {
		return nil, err
	}
	l, err := s.logOf(a.Ref, a.Stream)
	if err != nil {
		return nil, err
	}
	select {
	case s.heavy <- struct{}{}:
		defer func() { <-s.heavy }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	max := min(max(a.Max, 0), MaxRead)
	var c sandbox.Chunk
	if drain {
		c, err = l.Drain(max)
	} else {
		c, err = l.ReadFrom(a.Offset, max)
	}
	if err != nil && !errors.Is(err, sandbox.ErrSpill) {
		return nil, err
	}
	ans := chunkAnswer{chunkResult: chunkResult{Data: c.Data, Next: c.Next, Dropped: c.Dropped, EOF: c.EOF, State: stateOf(l), Marks: c.Marks}}
	if err != nil {
		ans.Err = toWire(err)
	}
	return ans, nil
}

func (s *server) opRead(ctx context.Context, raw json.RawMessage) (any, error) {
	return s.readOp(ctx, raw, false)
}

func (s *server) opDrain(ctx context.Context, raw json.RawMessage) (any, error) {
	return s.readOp(ctx, raw, true)
}

func (s *server) opAck(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[logArgs](raw)
	if err != nil {
		return nil, err
	}
	l, err := s.logOf(a.Ref, a.Stream)
	if err != nil {
		return nil, err
	}
	l.Ack(a.Offset)
	return stateOf(l), nil
}

func (s *server) opLogState(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[logArgs](raw)
	if err != nil {
		return nil, err
	}
	l, err := s.logOf(a.Ref, a.Stream)
	if err != nil {
		return nil, err
	}
	return stateOf(l), nil
}

// opWatch answers once a watched stream grew past the client's offset or
// closed, or (with Exit) the process settled. The channels are taken
// before the state is checked, so a write in between still wakes it.
func (s *server) opWatch(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[watchArgs](raw)
	if err != nil {
		return nil, err
	}
	e, err := s.get(a.Ref)
	if err != nil {
		return nil, err
	}
	out, err := e.log(Stdout)
	if err != nil {
		return nil, err
	}
	errl, err := e.log(Stderr)
	if err != nil {
		return nil, err
	}
	for {
		var chOut, chErr, done <-chan struct{}
		if a.Stdout >= 0 {
			chOut = out.Changed()
		}
		if a.Stderr >= 0 {
			chErr = errl.Changed()
		}
		if a.Exit {
			done = e.done
		}
		res := WatchResult{Stdout: stateOf(out), Stderr: stateOf(errl), Exited: e.exited()}
		if fired(a.Stdout, res.Stdout) || fired(a.Stderr, res.Stderr) || a.Exit && res.Exited || chOut == nil && chErr == nil && done == nil {
			return res, nil
		}
		select {
		case <-chOut:
		case <-chErr:
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func fired(off int64, st LogState) bool { return off >= 0 && (st.End > off || st.Closed) }

// stdinOf is the open stdin of a live process.
func (s *server) stdinOf(ref string) (sandbox.StdinPipe, error) {
	e, err := s.get(ref)
	if err != nil {
		return nil, err
	}
	if e.h == nil {
		return nil, fmt.Errorf("stdin of %s: its keeper is gone: %w", ref, sandbox.ErrClosed)
	}
	st := e.h.Stdin()
	if st == nil {
		return nil, fmt.Errorf("stdin of %s: not open (spec stdin mode): %w", ref, sandbox.ErrClosed)
	}
	return st, nil
}

func (s *server) opWriteStdin(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[stdinArgs](raw)
	if err != nil {
		return nil, err
	}
	st, err := s.stdinOf(a.Ref)
	if err != nil {
		return nil, err
	}
	n, err := st.Write(ctx, a.Data)
	if err != nil {
		return nil, &tornError{n: n, err: err}
	}
	return countResult{N: n}, nil
}

func (s *server) opCloseStdin(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[refArgs](raw)
	if err != nil {
		return nil, err
	}
	st, err := s.stdinOf(a.Ref)
	if err != nil {
		return nil, err
	}
	return none{}, st.Close()
}

func (s *server) opSignal(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[signalArgs](raw)
	if err != nil {
		return nil, err
	}
	if a.Signal < 1 || a.Signal > 64 {
		return nil, fmt.Errorf("signal %d: %w", a.Signal, ErrProtocol)
	}
	e, err := s.get(a.Ref)
	if err != nil {
		return nil, err
	}
	if e.h == nil {
		return none{}, nil // settled: a signal after exit sends nothing
	}
	return none{}, e.h.Signal(syscall.Signal(a.Signal))
}

// opTerminate returns once the exit is recorded, like opWait.
func (s *server) opTerminate(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[terminateArgs](raw)
	if err != nil {
		return nil, err
	}
	mode := map[string]sandbox.TerminateMode{"graceful": sandbox.Graceful, "force": sandbox.Force}[a.Mode]
	if mode == 0 {
		return nil, fmt.Errorf("terminate mode %q: %w", a.Mode, ErrProtocol)
	}
	e, err := s.get(a.Ref)
	if err != nil {
		return nil, err
	}
	if e.h != nil && !e.exited() {
		if _, err := e.h.Terminate(ctx, mode); err != nil {
			return nil, err
		}
	}
	return waitEntry(ctx, e)
}

func (s *server) opWait(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[refArgs](raw)
	if err != nil {
		return nil, err
	}
	e, err := s.get(a.Ref)
	if err != nil {
		return nil, err
	}
	return waitEntry(ctx, e)
}

func waitEntry(ctx context.Context, e *entry) (any, error) {
	select {
	case <-e.done:
		return exitResult{Exit: exitToWire(e.exit)}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *server) opStats(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[refArgs](raw)
	if err != nil {
		return nil, err
	}
	e, err := s.get(a.Ref)
	if err != nil {
		return nil, err
	}
	if e.h == nil {
		return statsResult{}, nil
	}
	return statsToWire(e.h.Stats()), nil
}

// opCleanup removes an exited process: the backend's resources, the
// logs, and its directory with the records. Unknown refs are fine.
func (s *server) opCleanup(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[refArgs](raw)
	if err != nil {
		return nil, err
	}
	e, err := s.get(a.Ref)
	if err != nil {
		return none{}, nil
	}
	if !e.exited() {
		return nil, fmt.Errorf("cleanup %s: %w", a.Ref, sandbox.ErrRunning)
	}
	if ref, ok := e.backendRef(s.backend.Name()); ok {
		if err := s.backend.Cleanup(ctx, ref); err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	for _, l := range e.logs {
		if r, ok := l.(interface{ Remove() error }); ok {
			r.Remove()
		}
	}
	e.mu.Unlock()
	if err := os.RemoveAll(e.dir); err != nil {
		return nil, fmt.Errorf("cleanup %s: %w: %w", a.Ref, sandbox.ErrUnavailable, err)
	}
	s.mu.Lock()
	delete(s.table, e.id)
	s.mu.Unlock()
	s.feed.note(e.id, true)
	return none{}, nil
}

// opShutdown ends the keeper after its reply. Without StopAll it refuses
// while anything runs: the processes' pipes end with the keeper, so
// leaving them would orphan them.
func (s *server) opShutdown(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[shutdownArgs](raw)
	if err != nil {
		return nil, err
	}
	if a.StopAll {
		s.stopAll()
		return none{}, nil
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if n := len(s.running()); n > 0 {
		return nil, fmt.Errorf("shutdown: %d processes running (stop_all not set): %w", n, sandbox.ErrRunning)
	}
	s.stopping = true
	return none{}, nil
}

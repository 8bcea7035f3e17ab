package keeper

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/capsule-host/capsule-host/sandbox"
)

// Status is what the keeper knows of one process.
type Status struct {
	Ref   sandbox.Ref
	PID   int
	Phase sandbox.Phase
	Label string
	// Exit is set iff Phase is PhaseExited.
	Exit *Exit
}

var phases = map[string]sandbox.Phase{}

func init() {
	for _, p := range []sandbox.Phase{sandbox.PhaseStarting, sandbox.PhaseRunning, sandbox.PhaseExited, sandbox.PhaseMissing} {
		phases[p.String()] = p
	}
}

func (c *Client) ref(id string) sandbox.Ref {
	return sandbox.Ref{Backend: c.backend, ID: id, Lifetime: sandbox.LifetimeBackend}
}

// id checks that ref is this keeper's, as a backend refuses another's.
func (c *Client) id(ref sandbox.Ref) (string, error) {
	if ref.Backend != c.backend {
		return "", fmt.Errorf("ref of backend %q given to keeper %q: %w", ref.Backend, c.backend, sandbox.ErrNotFound)
	}
	return ref.ID, nil
}

func (c *Client) status(pi procInfo) (Status, error) {
	st := Status{Ref: c.ref(pi.Ref), PID: pi.PID, Label: pi.Label, Phase: phases[pi.Phase]}
	if st.Phase == 0 {
		return st, fmt.Errorf("keeper: phase %q: %w", pi.Phase, ErrProtocol)
	}
	if pi.Exit != nil {
		x := pi.Exit.exit()
		st.Exit = &x
	}
	return st, nil
}

// Start starts a persistent process. The keeper keeps its spill files in
// its own directory (Output.SpillDir is ignored). If ctx ends after the
// request was sent the process may still have started: List finds it.
func (c *Client) Start(ctx context.Context, spec sandbox.ProcessSpec) (Status, error) {
	w, err := specToWire(spec)
	if err != nil {
		return Status{}, err
	}
	var r startResult
	if err := c.call(ctx, opStart, startArgs{Spec: w}, &r); err != nil {
		if errors.Is(err, errTooLarge) {
			err = fmt.Errorf("%w: %w", err, sandbox.ErrInvalidSpec)
		}
		return Status{}, err
	}
	return Status{Ref: c.ref(r.Ref), PID: r.PID, Phase: sandbox.PhaseRunning}, nil
}

// List reports every process the keeper holds, exited ones until cleanup.
func (c *Client) List(ctx context.Context) ([]Status, error) {
	var r listResult
	if err := c.call(ctx, opList, struct{}{}, &r); err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(r.Procs))
	for _, pi := range r.Procs {
		st, err := c.status(pi)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Inspect reports one process; an unknown ref is PhaseMissing.
func (c *Client) Inspect(ctx context.Context, ref sandbox.Ref) (Status, error) {
	id, err := c.id(ref)
	if err != nil {
		return Status{Ref: ref, Phase: sandbox.PhaseMissing}, nil
	}
	var pi procInfo
	if err := c.call(ctx, opInspect, refArgs{Ref: id}, &pi); err != nil {
		return Status{}, err
	}
	return c.status(pi)
}

// Read is one read of a stream, with OutputLog.ReadFrom's semantics; max
// is capped at MaxRead. The log's state comes with it.
func (c *Client) Read(ctx context.Context, ref sandbox.Ref, s Stream, off int64, max int) (sandbox.Chunk, LogState, error) {
	return c.readOp(ctx, opRead, ref, s, off, max)
}

func (c *Client) readOp(ctx context.Context, op string, ref sandbox.Ref, s Stream, off int64, max int) (sandbox.Chunk, LogState, error) {
	id, err := c.id(ref)
	if err != nil {
		return sandbox.Chunk{}, LogState{}, err
	}
	var a chunkAnswer
	if err := c.call(ctx, op, logArgs{Ref: id, Stream: string(s), Offset: off, Max: max}, &a); err != nil {
		return sandbox.Chunk{}, LogState{}, err
	}
	ch := sandbox.Chunk{Data: a.Data, Next: a.Next, Dropped: a.Dropped, EOF: a.EOF}
	if a.Err != nil {
		return ch, a.State, fromWire(op, a.Err)
	}
	return ch, a.State, nil
}

// logCall is a one-argument log operation (ack, log_state).
func (c *Client) logCall(ctx context.Context, op string, ref sandbox.Ref, s Stream, off int64) (LogState, error) {
	id, err := c.id(ref)
	if err != nil {
		return LogState{}, err
	}
	var st LogState
	err = c.call(ctx, op, logArgs{Ref: id, Stream: string(s), Offset: off}, &st)
	return st, err
}

// Watch returns once what w asks for happened (see WatchRequest). It is
// how a follower waits for output or exit without polling.
func (c *Client) Watch(ctx context.Context, ref sandbox.Ref, w WatchRequest) (WatchResult, error) {
	id, err := c.id(ref)
	if err != nil {
		return WatchResult{}, err
	}
	var r WatchResult
	err = c.call(ctx, opWatch, watchArgs{Ref: id, WatchRequest: w}, &r)
	return r, err
}

// WriteStdin writes all of data (in frames of up to 1 MiB) or fails,
// like sandbox.Stdin.Write: n is how many bytes reached the process; a
// torn write (0 < n < len) leaves stdin closed.
func (c *Client) WriteStdin(ctx context.Context, ref sandbox.Ref, data []byte) (int, error) {
	id, err := c.id(ref)
	if err != nil {
		return 0, err
	}
	total := 0
	for len(data) > 0 {
		part := data[:min(len(data), maxStdinChunk)]
		var r countResult
		if err := c.call(ctx, opWriteStdin, stdinArgs{Ref: id, Data: part}, &r); err != nil {
			var te *tornError
			if errors.As(err, &te) {
				total += te.n
			}
			return total, err
		}
		total += r.N
		data = data[len(part):]
	}
	return total, nil
}

// CloseStdin closes the process's stdin.
func (c *Client) CloseStdin(ctx context.Context, ref sandbox.Ref) error {
	id, err := c.id(ref)
	if err != nil {
		return err
	}
	return c.call(ctx, opCloseStdin, refArgs{Ref: id}, nil)
}

// Signal sends sig to the process tree; after exit it sends nothing.
func (c *Client) Signal(ctx context.Context, ref sandbox.Ref, sig syscall.Signal) error {
	id, err := c.id(ref)
	if err != nil {
		return err
	}
	return c.call(ctx, opSignal, signalArgs{Ref: id, Signal: int(sig)}, nil)
}

// Terminate ends the tree as sandbox.Handle.Terminate does and returns
// the recorded exit.
func (c *Client) Terminate(ctx context.Context, ref sandbox.Ref, mode sandbox.TerminateMode) (Exit, error) {
	id, err := c.id(ref)
	if err != nil {
		return Exit{}, err
	}
	name := map[sandbox.TerminateMode]string{sandbox.Graceful: "graceful", sandbox.Force: "force"}[mode]
	if name == "" {
		return Exit{}, fmt.Errorf("terminate mode %d: %w", mode, sandbox.ErrInvalidSpec)
	}
	var r exitResult
	if err := c.call(ctx, opTerminate, terminateArgs{Ref: id, Mode: name}, &r); err != nil {
		return Exit{}, err
	}
	return r.Exit.exit(), nil
}

// Wait returns once the process has settled and its exit record is on
// disk. The deadline is the caller's: ctx.
func (c *Client) Wait(ctx context.Context, ref sandbox.Ref) (Exit, error) {
	id, err := c.id(ref)
	if err != nil {
		return Exit{}, err
	}
	var r exitResult
	if err := c.call(ctx, opWait, refArgs{Ref: id}, &r); err != nil {
		return Exit{}, err
	}
	return r.Exit.exit(), nil
}

// Stats reports what the backend measured; unknown fields are nil.
func (c *Client) Stats(ctx context.Context, ref sandbox.Ref) (sandbox.Stats, error) {
	id, err := c.id(ref)
	if err != nil {
		return sandbox.Stats{}, err
	}
	var r statsResult
	if err := c.call(ctx, opStats, refArgs{Ref: id}, &r); err != nil {
		return sandbox.Stats{}, err
	}
	return r.stats(), nil
}

// Cleanup removes an exited process and its records (ErrRunning while it
// runs; unknown refs are fine).
func (c *Client) Cleanup(ctx context.Context, ref sandbox.Ref) error {
	id, err := c.id(ref)
	if err != nil {
		return err
	}
	return c.call(ctx, opCleanup, refArgs{Ref: id}, nil)
}

// Shutdown ends the keeper. With stopAll every process is terminated
// first (graceful, then forced) and its exit recorded; without, the
// keeper refuses (ErrRunning) while anything runs.
func (c *Client) Shutdown(ctx context.Context, stopAll bool) error {
	return c.call(ctx, opShutdown, shutdownArgs{StopAll: stopAll}, nil)
}

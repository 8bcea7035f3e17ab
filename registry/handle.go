package registry

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Handle is one instance's process-handle resource: owning (from
// SpawnBackground: Drop kills and reaps) or attached (from Attach: Drop
// detaches). Every method re-checks that ctx's Caller owns it, so a
// handle that leaks across calls of different principals on one pooled
// instance is inert (the peer's #997).
type Handle struct {
	r        *Registry
	p        *proc
	own      owner
	attached bool
	dropped  atomic.Bool
}

// check authorises a handle call: the handle is live, ctx's caller owns
// it, and (attached) the process is still in the registry.
func (h *Handle) check(ctx context.Context) error {
	if h == nil || h.p == nil {
		return fmt.Errorf("%w: nil process handle", ErrClosed)
	}
	o, err := h.r.caller(ctx)
	if err != nil {
		return err
	}
	if o != h.own {
		// Before any state check: another caller learns nothing, not
		// even whether the owner dropped the handle.
		return ErrNoSuchProcess
	}
	if h.dropped.Load() {
		return fmt.Errorf("%w: the process handle was dropped", ErrClosed)
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.p.forgotten {
		return ErrNoSuchProcess
	}
	h.p.lastTouch = h.r.now()
	return nil
}

// Attached reports whether Drop detaches (true) or reaps (false).
func (h *Handle) Attached() bool { return h.attached }

// ReadLogs drains both streams.
func (h *Handle) ReadLogs(ctx context.Context) (Logs, error) {
	if err := h.check(ctx); err != nil {
		return Logs{}, err
	}
	return h.r.readLogs(h.p)
}

// WriteStdin: see Registry.WriteStdin. A spawn-background process's stdin
// stays open after the prelude until CloseStdin or Drop.
func (h *Handle) WriteStdin(ctx context.Context, data []byte) (int, error) {
	if err := h.check(ctx); err != nil {
		return 0, err
	}
	return h.r.writeStdin(ctx, h.p, data)
}

// CloseStdin is idempotent.
func (h *Handle) CloseStdin(ctx context.Context) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	return h.r.closeStdin(h.p)
}

func (h *Handle) Signal(ctx context.Context, s Signal) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	return h.r.signal(ctx, h.p, s)
}

// Kill is an immediate SIGKILL to the tree, also on an attached handle.
func (h *Handle) Kill(ctx context.Context) (Exit, error) {
	if err := h.check(ctx); err != nil {
		return Exit{}, err
	}
	return h.r.kill(ctx, h.p)
}

// Wait: nil on an attached handle is ErrInvalidInput (an unbounded wait
// would pin a pooled instance); on an owning handle nil means "up to
// WaitCap". Every bound is capped by WaitCap.
func (h *Handle) Wait(ctx context.Context, timeout *time.Duration) (Exit, error) {
	if err := h.check(ctx); err != nil {
		return Exit{}, err
	}
	t, err := h.bound(timeout)
	if err != nil {
		return Exit{}, err
	}
	return h.r.wait(ctx, h.p, t)
}

func (h *Handle) bound(timeout *time.Duration) (time.Duration, error) {
	if timeout == nil {
		if h.attached {
			return 0, fmt.Errorf("%w: wait on an attached handle needs a timeout", ErrInvalidInput)
		}
		return h.r.cfg.Defaults.WaitCap, nil
	}
	return *timeout, nil
}

// WaitWithOutput waits (as Wait) and then drains both streams.
func (h *Handle) WaitWithOutput(ctx context.Context, timeout *time.Duration) (Result, error) {
	if err := h.check(ctx); err != nil {
		return Result{}, err
	}
	t, err := h.bound(timeout)
	if err != nil {
		return Result{}, err
	}
	e, err := h.r.wait(ctx, h.p, t)
	if err != nil {
		return Result{}, err
	}
	res := Result{Exit: e}
	for _, s := range []Stream{Stdout, Stderr} {
		l := h.p.log(s)
		c, err := l.Drain(h.r.cfg.Defaults.ReadMax)
		if err != nil {
			return Result{}, mapSandboxErr("wait-with-output", err)
		}
		if c.Dropped > 0 || c.Next < l.End() {
			res.Truncated = true
		}
		if s == Stdout {
			res.Stdout = c.Data
		} else {
			res.Stderr = c.Data
		}
	}
	return res, nil
}

// OSPid is advisory; ErrClosed once the process has exited.
func (h *Handle) OSPid(ctx context.Context) (uint32, error) {
	if err := h.check(ctx); err != nil {
		return 0, err
	}
	h.r.syncExit(h.p)
	h.r.mu.Lock()
	exited := h.p.exited
	h.r.mu.Unlock()
	pid := h.p.h.PID()
	if exited || pid <= 0 {
		return 0, fmt.Errorf("%w: the process has exited", ErrClosed)
	}
	return uint32(pid), nil
}

// Drop ends this handle: reap (owning) or detach (attached). Idempotent.
// A ctx with no caller (an instance reset, not a guest call) may drop any
// handle; a ctx with a different caller is refused.
func (h *Handle) Drop(ctx context.Context) error {
	if h == nil || h.p == nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if c, ok := CallerFrom(ctx); ok && (owner{c.Capsule, c.Principal, c.Fallback}) != h.own {
		return ErrNoSuchProcess
	}
	if !h.dropped.CompareAndSwap(false, true) {
		return nil
	}
	if h.attached {
		return nil
	}
	r, p := h.r, h.p
	r.mu.Lock()
	r.claimLocked(p, ReasonKilled)
	r.mu.Unlock()
	if _, err := r.terminate(context.WithoutCancel(ctx), p, 0); err != nil {
		r.log.Error("drop: terminate failed", append(p.attrs(), "err", err)...)
	}
	r.recordExit(p)
	r.forget(p)
	return nil
}

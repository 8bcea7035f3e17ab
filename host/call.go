package host

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/process"
	toolpkg "github.com/capsule-host/capsule-host/host/tool"
	"github.com/capsule-host/capsule-host/registry"
)

type principalKey struct{}

// WithPrincipal returns ctx carrying the principal a call acts for. The
// principal travels in the context, never as an argument; it is
// validated by Call.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalFrom returns the principal carried by ctx.
func PrincipalFrom(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}

// ValidPrincipal checks the principal grammar (the registry's): 1..128
// bytes of [A-Za-z0-9._@:-], starting with a letter or digit.
func ValidPrincipal(p string) error {
	if len(p) == 0 || len(p) > 128 {
		return fmt.Errorf("%w: principal must be 1..128 bytes, got %d", ErrInvalidPrincipal, len(p))
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || (i > 0 && (c == '.' || c == '_' || c == '@' || c == ':' || c == '-')) {
			continue
		}
		return fmt.Errorf("%w: principal %q: byte %d (%q) is outside [A-Za-z0-9][A-Za-z0-9._@:-]*", ErrInvalidPrincipal, p, i, c)
	}
	return nil
}

// Result is a successful tool call.
type Result struct {
	// Output is the tool's JSON output.
	Output string
	// Instance is the id of the instance that ran the call.
	Instance uint64
}

func (h *Host) lookup(capsule string) (*Capsule, error) {
	h.mu.RLock()
	c, ok := h.capsules[capsule]
	closed := h.closed
	h.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownCapsule, capsule)
	}
	return c, nil
}

// callContext is the context guest code and host functions run under:
// the caller (capsule, principal) for the registry and the instance's
// handle table for the process bindings.
func (h *Host) callContext(ctx context.Context, in *instance, c registry.Caller) context.Context {
	return registry.WithCaller(process.WithInstance(ctx, in.proc), c)
}

// Call runs one tool call on any instance of the capsule's pool.
//
// The principal comes from ctx (WithPrincipal); without one the call runs
// as the capsule's owner-fallback principal. The deadline is the sooner of
// ctx's and Config.CallTimeout. Errors: ErrUnknownCapsule,
// ErrUnknownTool, ErrInvalidPrincipal, *TimeoutError (ErrTimeout),
// ErrCancelled, *TrapError (ErrTrap; the instance was discarded),
// *ToolError (ErrToolFailed: the tool's own err result).
func (h *Host) Call(ctx context.Context, capsule, tool, input string) (Result, error) {
	c, err := h.lookup(capsule)
	if err != nil {
		return Result{}, err
	}
	if !utf8.ValidString(input) {
		return Result{}, fmt.Errorf("%w: capsule %q tool %q: input is not valid UTF-8", ErrInvalidInput, capsule, tool)
	}
	if !c.tool(tool) {
		return Result{}, fmt.Errorf("%w: capsule %q has no tool %q", ErrUnknownTool, capsule, tool)
	}
	caller := registry.Caller{Capsule: capsule}
	owner := h.cfg.OwnerPrincipal(capsule)
	if p, ok := PrincipalFrom(ctx); ok {
		if err := ValidPrincipal(p); err != nil {
			return Result{}, fmt.Errorf("capsule %q tool %q: %w", capsule, tool, err)
		}
		if p == owner {
			return Result{}, fmt.Errorf("%w: capsule %q tool %q: principal %q is the capsule's owner-fallback and cannot be claimed", ErrInvalidPrincipal, capsule, tool, p)
		}
		caller.Principal = p
	} else {
		caller.Principal, caller.Fallback = owner, true
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.CallTimeout)
	defer cancel()
	in, err := c.pool.acquire(ctx)
	for errors.Is(err, errPoolClosed) {
		// The capsule was reloaded while we waited: the new version
		// serves the call (its tools are checked again).
		if c, err = h.lookup(capsule); err != nil {
			return Result{}, err
		}
		if !c.tool(tool) {
			return Result{}, fmt.Errorf("%w: capsule %q has no tool %q", ErrUnknownTool, capsule, tool)
		}
		in, err = c.pool.acquire(ctx)
	}
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return Result{}, &TimeoutError{Capsule: capsule, Tool: tool, After: time.Since(start), Waiting: true}
		case errors.Is(err, context.Canceled):
			return Result{}, fmt.Errorf("%w: capsule %q tool %q: %w", ErrCancelled, capsule, tool, err)
		case errors.Is(err, ErrUnknownCapsule):
			return Result{}, fmt.Errorf("capsule %q tool %q: %w", capsule, tool, err)
		}
		return Result{}, fmt.Errorf("%w: capsule %q tool %q: %w", ErrInstance, capsule, tool, err)
	}
	cctx := h.callContext(ctx, in, caller)
	out, toolErr, err := callTool(cctx, in.ei, tool, input)
	if err != nil {
		// Whatever went wrong, the instance's state is suspect (an
		// interrupted guest is even closed by the engine): discard it.
		c.pool.put(cctx, in, true)
		var trap *engine.Trap
		switch {
		case errors.Is(err, engine.ErrInterrupted) && errors.Is(err, context.DeadlineExceeded),
			errors.Is(ctx.Err(), context.DeadlineExceeded):
			h.log.Warn("tool call timed out; instance discarded", "capsule", capsule, "tool", tool, "instance", in.id, "after", time.Since(start))
			return Result{}, &TimeoutError{Capsule: capsule, Tool: tool, After: time.Since(start)}
		case errors.Is(err, engine.ErrInterrupted), errors.Is(ctx.Err(), context.Canceled):
			return Result{}, fmt.Errorf("%w: capsule %q tool %q: %w", ErrCancelled, capsule, tool, context.Canceled)
		case errors.As(err, &trap):
			h.log.Warn("guest trapped; instance discarded", "capsule", capsule, "tool", tool, "instance", in.id, "reason", trap.Reason)
			return Result{}, &TrapError{Capsule: capsule, Tool: tool, Instance: in.id, Reason: trap.Reason, trap: trap}
		case errors.Is(err, toolpkg.ErrBadResult):
			// The Canonical ABI traps on a malformed result; so do we.
			h.log.Warn("guest broke the ABI; instance discarded", "capsule", capsule, "tool", tool, "instance", in.id, "err", err)
			return Result{}, &TrapError{Capsule: capsule, Tool: tool, Instance: in.id, Reason: err.Error(), trap: &engine.Trap{Reason: err.Error()}}
		}
		h.log.Error("tool call failed; instance discarded", "capsule", capsule, "tool", tool, "instance", in.id, "err", err)
		return Result{}, fmt.Errorf("capsule %q tool %q: instance %d: %w", capsule, tool, in.id, err)
	}
	c.pool.put(cctx, in, false)
	if toolErr != nil {
		return Result{Instance: in.id}, &ToolError{Capsule: capsule, Tool: tool, Message: *toolErr}
	}
	return Result{Output: out, Instance: in.id}, nil
}

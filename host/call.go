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
// ctx's and Config.CallTimeout. The input must satisfy the tool's
// declared JSON Schema before any guest code runs. Errors:
// ErrUnknownCapsule, ErrUnknownTool, ErrInvalidPrincipal,
// *InvalidInputError (ErrInvalidInput), *TimeoutError (ErrTimeout),
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
	if err := validateInput(capsule, tool, c.schemas[tool], input); err != nil {
		return Result{}, err
	}
	caller, err := h.caller(ctx, capsule, tool)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.CallTimeout)
	defer cancel()
	checked := c
	c, in, err := h.acquire(ctx, c, tool, start)
	if err != nil {
		return Result{}, err
	}
	if c != checked { // reloaded meanwhile: the new version's schema decides
		if err := validateInput(capsule, tool, c.schemas[tool], input); err != nil {
			c.pool.put(ctx, in, false)
			return Result{}, err
		}
	}
	cctx := h.callContext(ctx, in, caller)
	out, toolErr, err := callTool(cctx, in.ei, tool, input)
	if err != nil {
		// Whatever went wrong, the instance's state is suspect (an
		// interrupted guest is even closed by the engine): discard it,
		// once its memory use is noted (a closed instance has none).
		mem := memUse{used: int64(in.ei.Memory().Size()), limit: c.memLimit}
		c.pool.put(cctx, in, true)
		return Result{}, h.callFailed(ctx, capsule, tool, in.id, start, mem, err)
	}
	c.pool.put(cctx, in, false)
	if toolErr != nil {
		return Result{Instance: in.id}, &ToolError{Capsule: capsule, Tool: tool, Message: *toolErr}
	}
	return Result{Output: out, Instance: in.id}, nil
}

// caller is who a call acts for: the principal ctx carries, checked
// against the registry's grammar (registry.ValidPrincipal) and refused if
// it claims the capsule's owner-fallback, or that fallback itself.
func (h *Host) caller(ctx context.Context, capsule, tool string) (registry.Caller, error) {
	owner := h.cfg.OwnerPrincipal(capsule)
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return registry.Caller{Capsule: capsule, Principal: owner, Fallback: true}, nil
	}
	var pe *registry.PrincipalError
	if err := registry.ValidPrincipal(p); errors.As(err, &pe) {
		return registry.Caller{}, fmt.Errorf("capsule %q tool %q: %w: %s", capsule, tool, ErrInvalidPrincipal, pe.Reason)
	} else if err != nil {
		return registry.Caller{}, fmt.Errorf("capsule %q tool %q: %w: %w", capsule, tool, ErrInvalidPrincipal, err)
	}
	if p == owner {
		return registry.Caller{}, fmt.Errorf("%w: capsule %q tool %q: principal %q is the capsule's owner-fallback and cannot be claimed", ErrInvalidPrincipal, capsule, tool, p)
	}
	return registry.Caller{Capsule: capsule, Principal: p}, nil
}

// acquire takes an instance of c's pool for tool. When the capsule is
// reloaded meanwhile, the new version serves the call (its tools checked
// again), so it returns the capsule it acquired from.
func (h *Host) acquire(ctx context.Context, c *Capsule, tool string, start time.Time) (*Capsule, *instance, error) {
	capsule := c.Name()
	in, err := c.pool.acquire(ctx)
	for errors.Is(err, errPoolClosed) {
		if c, err = h.lookup(capsule); err != nil {
			return nil, nil, err
		}
		if !c.tool(tool) {
			return nil, nil, fmt.Errorf("%w: capsule %q has no tool %q", ErrUnknownTool, capsule, tool)
		}
		in, err = c.pool.acquire(ctx)
	}
	// An instance made for this call under its context fails with the
	// engine's interruption (a trap) when the deadline passes mid
	// instantiation: that is the call's timeout too, not a broken capsule.
	switch {
	case err == nil:
		return c, in, nil
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, nil, &TimeoutError{Capsule: capsule, Tool: tool, After: time.Since(start), Waiting: true}
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return nil, nil, fmt.Errorf("%w: capsule %q tool %q: %w", ErrCancelled, capsule, tool, err)
	case errors.Is(err, ErrUnknownCapsule):
		return nil, nil, fmt.Errorf("capsule %q tool %q: %w", capsule, tool, err)
	}
	return nil, nil, fmt.Errorf("%w: capsule %q tool %q: %w", ErrInstance, capsule, tool, err)
}

// memUse is an instance's linear memory at the end of a failed call and
// its limit, bytes.
type memUse struct{ used, limit int64 }

// memorySlack is how close to its limit a trapped instance's memory must
// be for the trap to be blamed on the limit: the engines refuse a
// memory.grow with -1 (the wasm rule) and say nothing, so the host can
// only see that the guest trapped with (nearly) all its memory in use. A
// Go guest grows its heap in 4 MiB arenas, so one refused growth leaves
// it up to that far below the limit.
const memorySlack = 4 << 20

// atLimit: less than memorySlack (or an eighth of a small limit) was left.
func (m memUse) atLimit() bool {
	return m.used > 0 && m.limit-m.used < min(memorySlack, m.limit/8)
}

// callFailed classifies a failed call (the instance already discarded):
// a timeout, a cancellation, a trap, an ABI violation (a trap too), or
// anything else, logged.
func (h *Host) callFailed(ctx context.Context, capsule, tool string, id uint64, start time.Time, mem memUse, err error) error {
	var trap *engine.Trap
	switch {
	case errors.Is(err, engine.ErrInterrupted) && errors.Is(err, context.DeadlineExceeded),
		errors.Is(ctx.Err(), context.DeadlineExceeded):
		h.log.Warn("tool call timed out; instance discarded", "capsule", capsule, "tool", tool, "instance", id, "after", time.Since(start))
		return &TimeoutError{Capsule: capsule, Tool: tool, After: time.Since(start)}
	case errors.Is(err, engine.ErrInterrupted), errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("%w: capsule %q tool %q: %w", ErrCancelled, capsule, tool, context.Canceled)
	case errors.As(err, &trap):
		te := &TrapError{Capsule: capsule, Tool: tool, Instance: id, Reason: trap.Reason, trap: trap,
			MemoryBytes: mem.used, MemoryLimit: mem.limit, memoryLimit: mem.atLimit()}
		if te.memoryLimit {
			te.Reason = fmt.Sprintf("linear memory limit of %d bytes reached (%d in use): %s", mem.limit, mem.used, trap.Reason)
		}
		h.log.Warn("guest trapped; instance discarded", "capsule", capsule, "tool", tool, "instance", id, "reason", te.Reason, "memory", mem.used)
		return te
	case errors.Is(err, toolpkg.ErrBadResult):
		// The Canonical ABI traps on a malformed result; so do we.
		h.log.Warn("guest broke the ABI; instance discarded", "capsule", capsule, "tool", tool, "instance", id, "err", err)
		return &TrapError{Capsule: capsule, Tool: tool, Instance: id, Reason: err.Error(), trap: &engine.Trap{Reason: err.Error()}}
	}
	h.log.Error("tool call failed; instance discarded", "capsule", capsule, "tool", tool, "instance", id, "err", err)
	return fmt.Errorf("capsule %q tool %q: instance %d: %w", capsule, tool, id, err)
}

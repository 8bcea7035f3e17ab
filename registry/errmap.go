package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/capsule-host/capsule-host/sandbox"
)

// mapSandboxErr is the ONE place where seam errors become registry
// classes (and so WIT error-codes). op names what the registry was doing.
// The seam's message is kept for the person reading it; only the class
// changes.
func mapSandboxErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var class error
	var detail string
	var se *sandbox.SpawnError
	switch {
	case errors.As(err, &se) && errors.Is(se.Cause, fs.ErrNotExist):
		class, detail = ErrInvalidInput, "command not found"
	case errors.As(err, &se) && errors.Is(se.Cause, fs.ErrPermission):
		class, detail = ErrInvalidInput, "command not executable (permission denied)"
	case errors.Is(err, sandbox.ErrSpawn):
		class, detail = ErrUnavailable, "spawn failed"
	case errors.Is(err, sandbox.ErrBoundaryEscape):
		class = ErrBoundaryEscape
	case errors.Is(err, sandbox.ErrInvalidEnv):
		class = ErrInvalidInput
	case errors.Is(err, sandbox.ErrLimitsUnsupported):
		class, detail = ErrUnavailable, "resource limit cannot be enforced by this backend"
	case errors.Is(err, sandbox.ErrInvalidSpec):
		class = ErrInvalidInput
	case errors.Is(err, sandbox.ErrUnavailable):
		class = ErrUnavailable
	case errors.Is(err, sandbox.ErrClosed):
		class = ErrClosed
	case errors.Is(err, sandbox.ErrGracefulTimeout), errors.Is(err, context.DeadlineExceeded):
		class = ErrWaitTimeout
	case errors.Is(err, context.Canceled):
		class = ErrCancelled
	case errors.Is(err, sandbox.ErrNotFound):
		class, detail = ErrUnavailable, "backend lost the process"
	default:
		class = ErrInternal
	}
	if detail != "" {
		return fmt.Errorf("%w: %s: %s: %v", class, op, detail, err)
	}
	return fmt.Errorf("%w: %s: %v", class, op, err)
}

// ctxErr maps a context end to the registry's classes: our own bound
// expiring is a wait-timeout, the caller going away is cancelled.
func ctxErr(ctx context.Context, op string) error {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s", ErrWaitTimeout, op)
	}
	return fmt.Errorf("%w: %s", ErrCancelled, op)
}

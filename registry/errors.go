package registry

import (
	"errors"
	"fmt"
)

// Error classes, one per WIT error-code case of capsule:process@1.1.0.
// Call sites wrap them with %w and a message naming what was wrong; the
// host maps a class to its case with errors.Is (see host/process).
var (
	ErrCapabilityDenied   = errors.New("capability denied")
	ErrInvalidInput       = errors.New("invalid input")
	ErrBoundaryEscape     = errors.New("boundary escape")
	ErrQuota              = errors.New("process quota reached")
	ErrTooLarge           = errors.New("too large")
	ErrClosed             = errors.New("closed")
	ErrCancelled          = errors.New("cancelled")
	ErrWaitTimeout        = errors.New("wait timed out")
	ErrUnavailable        = errors.New("unavailable")
	ErrInternal           = errors.New("internal error")
	ErrNoSuchProcess      = errors.New("no such process")
	ErrRegistryFull       = errors.New("registry full")
	ErrPersistUnsupported = errors.New("persistent processes unsupported for this caller")
	ErrTornWrite          = errors.New("torn stdin write")
	// ErrNodeFull is a node at its NodeCapacity, or a cluster whose every
	// live node is; errors.Is(err, ErrRegistryFull) holds (WIT
	// registry-full).
	ErrNodeFull = fmt.Errorf("%w: node at capacity", ErrRegistryFull)
)

// TornWriteError reports a stdin write that failed after Written leading
// bytes reached the process. errors.Is(err, ErrTornWrite) holds.
type TornWriteError struct {
	Written int64
	Cause   error
}

func (e *TornWriteError) Error() string {
	return fmt.Sprintf("torn stdin write: %d bytes written before: %v", e.Written, e.Cause)
}

func (e *TornWriteError) Unwrap() []error { return []error{ErrTornWrite, e.Cause} }

package process

import (
	"context"
	"errors"
	"strings"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
)

// errorCases is THE mapping from registry error classes to error-code
// cases, for both versions: 1.1.0 is 1:1 with the registry, 1.0.0 is the
// total 1.1.0→1.0.0 mapping. Rows are tried in order with errors.Is; the
// first match wins (torn-write first: a *registry.TornWriteError also
// unwraps to its cause, which may be ErrClosed). The payload follows from
// the target case's WIT type: string cases carry err.Error(), torn-write
// carries the prefix byte count, the others carry nothing. An error that
// matches no row is a host fault: internal(err.Error()).
var errorCases = []struct {
	class    error
	v11, v10 uint32 // case index in error-code@1.1.0 / @1.0.0
}{
	{registry.ErrTornWrite, 13, 5},          // torn-write(u64) → closed
	{registry.ErrCapabilityDenied, 0, 0},    // capability-denied(string)
	{registry.ErrInvalidInput, 1, 1},        // invalid-input(string)
	{registry.ErrBoundaryEscape, 2, 2},      // boundary-escape(string)
	{registry.ErrQuota, 3, 3},               // quota
	{registry.ErrTooLarge, 4, 4},            // too-large(string)
	{registry.ErrClosed, 5, 5},              // closed
	{registry.ErrCancelled, 6, 6},           // cancelled
	{context.Canceled, 6, 6},                // cancelled
	{context.DeadlineExceeded, 6, 6},        // cancelled: the call's deadline
	{registry.ErrWaitTimeout, 7, 7},         // wait-timeout
	{registry.ErrUnavailable, 8, 8},         // unavailable(string)
	{registry.ErrInternal, 9, 9},            // internal(string)
	{registry.ErrNoSuchProcess, 10, 5},      // no-such-process → closed
	{registry.ErrRegistryFull, 11, 3},       // registry-full → quota
	{registry.ErrPersistUnsupported, 12, 0}, // persist-unsupported → capability-denied(string)
}

const caseInternal = 9 // internal(string), the same index in both versions

// errorCode lowers err to the error-code variant of the version whose
// descriptor is ec (v11 selects the column).
func errorCode(err error, ec *cabi.Type, v11 bool) cabi.Variant {
	c := uint32(caseInternal)
	for _, row := range errorCases {
		if errors.Is(err, row.class) {
			c = row.v10
			if v11 {
				c = row.v11
			}
			break
		}
	}
	return cabi.Variant{Case: c, Payload: errorPayload(err, ec.Cases()[c].Type)}
}

func errorPayload(err error, t *cabi.Type) cabi.Value {
	switch {
	case t == nil:
		return nil
	case t.Kind() == cabi.KU64:
		var tw *registry.TornWriteError
		if errors.As(err, &tw) && tw.Written > 0 {
			return uint64(tw.Written)
		}
		return uint64(0)
	default:
		// Messages may quote paths or bytes: keep them valid UTF-8.
		return strings.ToValidUTF8(err.Error(), "\uFFFD")
	}
}

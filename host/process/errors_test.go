package process

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
)

// TestErrorMapping checks every registry error class against its
// error-code case in both versions: 1.1.0 is 1:1, 1.0.0 is the total
// 1.1.0→1.0.0 mapping documented in RFC.md §6.
func TestErrorMapping(t *testing.T) {
	wrap := func(class error) error { return fmt.Errorf("%w: spawn-request.cmd %q not in exec", class, "/bin/x") }
	torn := &registry.TornWriteError{Written: 42, Cause: registry.ErrClosed}
	tests := []struct {
		name string
		err  error
		c11  string
		p11  cabi.Value
		c10  string
		p10  cabi.Value
	}{
		{"capability-denied", wrap(registry.ErrCapabilityDenied), "capability-denied", "msg", "capability-denied", "msg"},
		{"invalid-input", wrap(registry.ErrInvalidInput), "invalid-input", "msg", "invalid-input", "msg"},
		{"boundary-escape", wrap(registry.ErrBoundaryEscape), "boundary-escape", "msg", "boundary-escape", "msg"},
		{"quota", wrap(registry.ErrQuota), "quota", nil, "quota", nil},
		{"too-large", wrap(registry.ErrTooLarge), "too-large", "msg", "too-large", "msg"},
		{"closed", wrap(registry.ErrClosed), "closed", nil, "closed", nil},
		{"cancelled", wrap(registry.ErrCancelled), "cancelled", nil, "cancelled", nil},
		{"context canceled", fmt.Errorf("wait: %w", context.Canceled), "cancelled", nil, "cancelled", nil},
		{"deadline", context.DeadlineExceeded, "cancelled", nil, "cancelled", nil},
		{"wait-timeout", wrap(registry.ErrWaitTimeout), "wait-timeout", nil, "wait-timeout", nil},
		{"unavailable", wrap(registry.ErrUnavailable), "unavailable", "msg", "unavailable", "msg"},
		{"internal", wrap(registry.ErrInternal), "internal", "msg", "internal", "msg"},
		{"no-such-process", wrap(registry.ErrNoSuchProcess), "no-such-process", nil, "closed", nil},
		{"registry-full", wrap(registry.ErrRegistryFull), "registry-full", nil, "quota", nil},
		{"persist-unsupported", wrap(registry.ErrPersistUnsupported), "persist-unsupported", nil, "capability-denied", "msg"},
		{"torn-write", torn, "torn-write", uint64(42), "closed", nil},
		{"torn-write wrapped", fmt.Errorf("write-stdin: %w", torn), "torn-write", uint64(42), "closed", nil},
		{"bare torn class", registry.ErrTornWrite, "torn-write", uint64(0), "closed", nil},
		{"unclassified", io.ErrUnexpectedEOF, "internal", "msg", "internal", "msg"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []struct {
				ec      *cabi.Type
				v11     bool
				c       string
				payload cabi.Value
			}{{tErrorCode11, true, tc.c11, tc.p11}, {tErrorCode10, false, tc.c10, tc.p10}} {
				got := errorCode(tc.err, v.ec, v.v11)
				if name := v.ec.Cases()[got.Case].Name; name != v.c {
					t.Errorf("v11=%v: case %s, want %s", v.v11, name, v.c)
				}
				want := v.payload
				if want == "msg" {
					want = tc.err.Error() // the class's message, with the call site's detail
				}
				if got.Payload != want {
					t.Errorf("v11=%v: payload %#v, want %#v", v.v11, got.Payload, want)
				}
			}
		})
	}
}

// TestErrorTableTotal: every registry class has a row, every row's case
// exists in both versions, and 1.1.0 is 1:1 (each registry class to its
// own case).
func TestErrorTableTotal(t *testing.T) {
	classes := []error{
		registry.ErrCapabilityDenied, registry.ErrInvalidInput, registry.ErrBoundaryEscape, registry.ErrQuota,
		registry.ErrTooLarge, registry.ErrClosed, registry.ErrCancelled, registry.ErrWaitTimeout,
		registry.ErrUnavailable, registry.ErrInternal, registry.ErrNoSuchProcess, registry.ErrRegistryFull,
		registry.ErrPersistUnsupported, registry.ErrTornWrite,
	}
	if len(classes) != len(tErrorCode11.Cases()) {
		t.Fatalf("%d registry classes, %d error-code@1.1.0 cases", len(classes), len(tErrorCode11.Cases()))
	}
	seen := map[uint32]bool{}
	for _, cl := range classes {
		found := false
		for _, row := range errorCases {
			if row.class == cl {
				found = true
				if row.v11 >= uint32(len(tErrorCode11.Cases())) || row.v10 >= uint32(len(tErrorCode10.Cases())) {
					t.Errorf("%v: case out of range", cl)
				}
				if seen[row.v11] {
					t.Errorf("%v: 1.1.0 case %d used twice", cl, row.v11)
				}
				seen[row.v11] = true
			}
		}
		if !found {
			t.Errorf("registry class %v has no row", cl)
		}
	}
}

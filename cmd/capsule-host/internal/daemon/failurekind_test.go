package daemon

import (
	"fmt"
	"testing"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/engine"
)

// A component refusal has its own class, not "internal": the engine one
// (wasmtime's ErrLinkUnsupported, which is also ErrUnsupported) wins.
func TestFailureKindComponent(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: engine wasmtime cannot run components (%w)", component.ErrUnsupported, engine.ErrLinkUnsupported), "engine"},
		{fmt.Errorf("x: %w", component.ErrMismatch), "import"},
		{fmt.Errorf("x: %w", component.ErrUnsupported), "component"},
		{fmt.Errorf("x: %w", component.ErrMalformed), "component"},
		{fmt.Errorf("x: %w", host.ErrChecksum), "checksum"},
		{fmt.Errorf("x"), "internal"},
	}
	for _, tc := range tests {
		if got := FailureKind(tc.err); got != tc.want {
			t.Errorf("FailureKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

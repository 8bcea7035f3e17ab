package local

import (
	"errors"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// A limit no hierarchy can enforce names its kind from the cgroups
// LimitError's controller: pids as pids, memory as memory. The System has
// no hierarchy, so nothing on the machine is touched.
func TestGroupErrorNamesTheLimit(t *testing.T) {
	s := &cgroups.System{V1: map[string]string{}, V1Paths: map[string]string{}, V2Controllers: map[string]bool{}}
	p := &proc{b: &Backend{name: "local"}}
	for _, tc := range []struct {
		lim  cgroups.Limits
		kind sandbox.LimitKind
	}{
		{cgroups.Limits{MemoryBytes: 1 << 20}, sandbox.LimitMemory},
		{cgroups.Limits{Pids: 4}, sandbox.LimitPids},
		{cgroups.Limits{MemoryBytes: 1 << 20, Pids: 4}, sandbox.LimitMemory}, // the first refused
	} {
		_, err := s.NewGroup("t", tc.lim)
		got := p.groupError(err)
		if !errors.Is(got, sandbox.ErrLimitsUnsupported) || !strings.HasPrefix(got.Error(), string(tc.kind)+" limit: ") {
			t.Errorf("limits %+v: %v, want ErrLimitsUnsupported naming %s", tc.lim, got, tc.kind)
		}
	}
}

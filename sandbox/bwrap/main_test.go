package bwrap

import (
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// TestMain lets this test binary be the local backend's exec helper, which
// bwrap-wrapped processes with rlimits or v1 cgroup limits start through.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

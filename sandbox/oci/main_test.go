package oci

import (
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// TestMain lets the test binary become the monitor: Start re-executes it
// in the monitor role (see monitor.go).
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

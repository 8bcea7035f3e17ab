package local_test

import (
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox/local"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// TestMain lets this test binary be the exec helper (limits that need it
// re-execute the binary): the role runs only through reexec.Init.
func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }

// The exec helper is a registered reexec role, not an init-time side effect.
func TestHelperRegistered(t *testing.T) {
	if !reexec.Registered(local.HelperArg0) {
		t.Fatalf("exec helper %q is not a reexec role", local.HelperArg0)
	}
}

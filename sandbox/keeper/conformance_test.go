package keeper_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/backendtest"
	"github.com/capsule-host/capsule-host/sandbox/bwrap"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// keeperBackend is a keeper-backed backend on a fresh directory; the
// keeper is started by its first call and stopped (with everything it
// holds) at the test's end.
func keeperBackend(t testing.TB, name string, bw *bwrap.Options) *keeper.Backend {
	t.Helper()
	dir := newDir(t.(*testing.T))
	b, err := keeper.NewBackend(keeper.Config{Dir: dir, Name: name, Bwrap: bw, FrameTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := b.Close(ctx, true); err != nil {
			t.Errorf("closing the keeper backend: %v", err)
		}
	})
	return b
}

// TestConformance runs the shared backend suite through a keeper: every
// process is started, read, written, signalled and waited for over the
// keeper's socket, with the embedded local backend behind it.
func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Factory{
		New:      func(t testing.TB) sandbox.Backend { return keeperBackend(t, "local", nil) },
		Shell:    "/bin/sh",
		HostPIDs: true,
	})
}

// TestConformanceBwrap is the same with bubblewrap embedded in the keeper.
func TestConformanceBwrap(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIP (loud): bwrap is not installed; `make test` installs it (apt-get install bubblewrap)")
	}
	backendtest.Run(t, backendtest.Factory{
		New: func(t testing.TB) sandbox.Backend {
			return keeperBackend(t, "bwrap", &bwrap.Options{StateDir: t.TempDir()})
		},
		Shell: "/bin/sh",
		Adjust: func(t testing.TB, sp *sandbox.ProcessSpec) {
			sp.Isolation.Workspace = sp.Cwd
		},
		HostPIDs: true,
		Skip: map[string]string{
			backendtest.CaseGrandchildStdout: "bwrap ends the sandbox's pid namespace when the command exits (see sandbox/bwrap's conformance test)",
		},
	})
}

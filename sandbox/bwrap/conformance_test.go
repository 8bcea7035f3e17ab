package bwrap

import (
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/backendtest"
)

// TestConformance runs the shared backend suite with every process in a
// bubblewrap sandbox whose workspace is the suite's cwd.
func TestConformance(t *testing.T) {
	needBwrap(t)
	backendtest.Run(t, backendtest.Factory{
		New: func(t testing.TB) sandbox.Backend {
			b, err := New(Options{StateDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Shell: "/bin/sh",
		Adjust: func(t testing.TB, sp *sandbox.ProcessSpec) {
			sp.Isolation.Workspace = sp.Cwd
		},
		HostPIDs: true,
	})
}

package local_test

import (
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/backendtest"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

func newBackend(t testing.TB, opts local.Options) sandbox.Backend {
	b, err := local.New(opts)
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	return b
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Factory{
		New:      func(t testing.TB) sandbox.Backend { return newBackend(t, local.Options{}) },
		Shell:    "/bin/sh",
		HostPIDs: true,
	})
}

// TestConformanceMultiplex runs the suite with the keeper's mode: output
// on the shared epoll loop, roots watched by SIGCHLD without a pidfd.
func TestConformanceMultiplex(t *testing.T) {
	backendtest.Run(t, backendtest.Factory{
		New:      func(t testing.TB) sandbox.Backend { return newBackend(t, local.Options{Multiplex: true}) },
		Shell:    "/bin/sh",
		HostPIDs: true,
	})
}

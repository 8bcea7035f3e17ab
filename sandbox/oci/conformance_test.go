package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/backendtest"
)

// TestConformance runs the shared backend suite against runc containers
// from the busybox rootfs, with container root mapped to an unprivileged
// host uid and capsule-oci-init as pid 1.
func TestConformance(t *testing.T) {
	needRuntime(t)
	backendtest.Run(t, backendtest.Factory{
		New: func(t testing.TB) sandbox.Backend {
			return newEnv(t, nil).b
		},
		Shell: "/bin/sh", // busybox, inside the rootfs
		Adjust: func(t testing.TB, sp *sandbox.ProcessSpec) {
			// The suite's cwd is a host temp dir: make it the workspace,
			// reachable and writable by the mapped container root.
			for d := filepath.Dir(sp.Cwd); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
				os.Chmod(d, 0o755)
			}
			os.Chown(sp.Cwd, testHostUID, testHostUID)
			sp.Isolation.Workspace = sp.Cwd
			sp.Isolation.Profile = "default"
		},
		HostPIDs: true,
	})
}

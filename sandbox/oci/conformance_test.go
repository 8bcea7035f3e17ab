package oci

import (
	"os"
	"os/exec"
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

// runscPath is the runsc binary for the gVisor variants, or "".
func runscPath() string {
	if p := os.Getenv("CAPSULE_RUNSC"); p != "" {
		return p
	}
	p, _ := exec.LookPath("runsc")
	return p
}

func withRunsc(runsc string) func(*Options) {
	return func(o *Options) {
		o.Runtimes = map[string]string{"runsc": runsc}
		p := o.Profiles["default"]
		p.Runtime = "runsc"
		o.Profiles["default"] = p
	}
}

// TestConformanceRunsc runs the suite under gVisor when runsc is present.
func TestConformanceRunsc(t *testing.T) {
	needRuntime(t)
	runsc := runscPath()
	if runsc == "" {
		t.Skip("SKIP LOUDLY: runsc (gVisor) not found; see TestRunsc for how to enable it")
	}
	backendtest.Run(t, backendtest.Factory{
		New: func(t testing.TB) sandbox.Backend {
			return newEnv(t, withRunsc(runsc)).b
		},
		Shell: "/bin/sh",
		Adjust: func(t testing.TB, sp *sandbox.ProcessSpec) {
			for d := filepath.Dir(sp.Cwd); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
				os.Chmod(d, 0o755)
			}
			sp.Isolation.Workspace = sp.Cwd
			sp.Isolation.Profile = "default"
		},
		HostPIDs: false, // the sandbox's processes live in gVisor's kernel
		Skip: map[string]string{
			backendtest.CaseGrandchildStdout: "a runsc container ends with its root process (no capsule-oci-init: " +
				"runsc has no --preserve-fds), so descendants die at once and nothing arrives during the drain",
			backendtest.CaseEnv: "runsc adds HOME from the rootfs's passwd when the spec has none, and without " +
				"capsule-oci-init (no --preserve-fds in runsc) nothing can remove it",
			backendtest.CaseLimitPids: "runsc's own sentry and gofer threads live in the container's pids cgroup: " +
				"a budget of 4 cannot even start the sandbox (give runsc profiles pids >= 64)",
		},
	})
}

//go:build !leanclient

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox/oci/rootfs"
)

// The OCI share of the durability tests: TestDurableRestart's processes
// include containers (real runc, a busybox profile) beside local and bwrap
// ones in one daemon; TestTerminalRestart has an OCI case.

var backendLine = regexp.MustCompile(`(?m)^backend = "[^"]*"$`)

// capsuleVariant copies the module of capsules/<src> into dir/<name>
// under a manifest naming it name and asking for backend (with the
// busybox profile for "oci"): one module serving several backends in one
// daemon.
func capsuleVariant(t testing.TB, dir, src, name, backend string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../capsules", src, "Capsule.toml"))
	if err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("backend = %q", backend)
	if backend == "oci" {
		line += "\nprofile = \"busybox\""
	}
	m := strings.Replace(string(b), fmt.Sprintf("name = %q", src), fmt.Sprintf("name = %q", name), 1)
	m = backendLine.ReplaceAllLiteralString(m, line)
	if !strings.Contains(m, fmt.Sprintf("name = %q", name)) || !strings.Contains(m, line) {
		t.Fatalf("capsules/%s/Capsule.toml: no name or backend line to rewrite", src)
	}
	caps := filepath.Join(dir, name)
	os.MkdirAll(caps, 0o755)
	if err := os.WriteFile(filepath.Join(caps, "Capsule.toml"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	wasm := src + ".wasm"
	copyFile(t, filepath.Join("../../capsules", src, wasm), filepath.Join(caps, wasm))
	return caps
}

// ociShellCapsule is the shell capsule's module as "shelloci" on OCI.
func ociShellCapsule(t testing.TB, dir string) string {
	return capsuleVariant(t, dir, "shell", "shelloci", "oci")
}

// ociMissing says what keeps the OCI backend from running here (root,
// runc, the busybox rootfs), "" when nothing does; root is the rootfs.
func ociMissing() (root, why string) {
	if os.Geteuid() != 0 {
		return "", "OCI containers need root (CI runs as root)"
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return "", "runc not installed (apt-get install runc)"
	}
	root, err := rootfs.Cached(rootfs.DefaultBusybox, filepath.Join(os.TempDir(), "capsule-test-cache"))
	if err != nil {
		return "", fmt.Sprintf("busybox rootfs: %v (apt-get install busybox-static)", err)
	}
	return root, ""
}

// ociConfig is the config's OCI part: the backend with a freshly built
// capsule-oci-init in dir, and a busybox profile in a user namespace.
func ociConfig(t testing.TB, dir, root string) string {
	t.Helper()
	os.Chmod(dir, 0o755) // the container's user-namespaced root reaches its workspace
	initPath := filepath.Join(dir, "capsule-oci-init")
	if out, err := exec.Command("gcc", "-static", "-Os", "-o", initPath, "../../sandbox/oci/init/capsule-oci-init.c").CombinedOutput(); err != nil {
		t.Fatalf("build capsule-oci-init: %v\n%s", err, out)
	}
	return fmt.Sprintf(`[backends.oci]
init = %q
[profiles.busybox]
rootfs = %q
[profiles.busybox.userns]
host_uid = 100000
host_gid = 100000
size = 65536
[profiles.busybox.limits]
memory_bytes = 268435456
pids = 256
`, initPath, root)
}

// ociDaemonDir builds the binary and a daemon directory whose config
// enables the OCI backend (ociConfig), serving the shell capsule's module
// as "shelloci"; withBwrap also enables bwrap and serves the bundled shell
// capsule on it. It skips loudly without root, runc or busybox.
func ociDaemonDir(t *testing.T, withBwrap bool) (bin, dir string) {
	t.Helper()
	skipSameBinary(t)
	root, why := ociMissing()
	if why != "" {
		t.Skip("SKIP LOUDLY: " + why)
	}
	bin = builtBinary(t)
	dir = t.TempDir()
	caps := ociShellCapsule(t, dir)
	capsules, enabled := fmt.Sprintf("%q", caps), `"oci"`
	if withBwrap {
		shell, err := filepath.Abs("../../capsules/shell")
		if err != nil {
			t.Fatal(err)
		}
		capsules, enabled = fmt.Sprintf("%q, %q", caps, shell), `"oci", "bwrap"`
	}
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(fmt.Sprintf("bundled = false\ncapsules = [%s]\n[backends]\nenabled = [%s]\n%s",
		capsules, enabled, ociConfig(t, dir, root))), 0o600)
	return bin, dir
}

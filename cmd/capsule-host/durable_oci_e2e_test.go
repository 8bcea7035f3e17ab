//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/sandbox/oci/rootfs"
)

// TestDurableRestartOCI is the crash test's OCI share, mixed with bwrap
// in one daemon, on the built binary with real runc: persistent counters
// in containers (the shell capsule's module under a manifest asking for
// backend "oci" and a busybox profile) and in bwrap sandboxes (the
// bundled shell capsule) survive one kill -9 of serve, through the
// containers' monitors and the keeper; a new serve re-adopts both kinds,
// every stream is gapless from its first byte and kept counting while no
// daemon ran, a cursor from before continues exactly, and another
// principal gets no-such-process.
func TestDurableRestartOCI(t *testing.T) {
	bin, dir := ociDaemonDir(t, true)
	mark := fmt.Sprintf("durable-oci-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	d1 := startServe(t, bin, dir, "--on-shutdown", "keep")
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(t, c, d1)
	counter := fmt.Sprintf(`i=0; while true; do i=$((i+1)); echo "%s $i"; sleep 0.1; done`, mark)
	type victim struct{ capsule, id, cursor string }
	var vs []victim
	for _, capsule := range []string{"shelloci", "shelloci", "shelloci", "shell", "shell", "shell"} {
		m, code := capsuleCall(t, c, capsule, "alice", "spawn_background_process", map[string]any{"command": counter})
		if code != "" {
			t.Fatalf("spawn through %s: %s", capsule, code)
		}
		id, _ := m["id"].(string)
		vs = append(vs, victim{capsule: capsule, id: id})
	}
	before := make([]int, len(vs))
	for i, v := range vs {
		for deadline := time.Now().Add(30 * time.Second); before[i] < 3; {
			m, code := capsuleCall(t, c, v.capsule, "alice", "read_process_logs", map[string]any{"id": v.id, "stream": "stdout"})
			if code != "" {
				t.Fatalf("%s: read before the crash: %s", v.capsule, code)
			}
			s, _ := m["stdout"].(string)
			before[i] = counterLines(t, "before the crash", mark, s, 1)
			vs[i].cursor, _ = m["cursor"].(string)
			if time.Now().After(deadline) {
				t.Fatalf("%s %s printed %d lines in 30 s", v.capsule, v.id, before[i])
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	d1.cmd.Process.Signal(syscall.SIGKILL)
	<-d1.exited
	time.Sleep(2 * time.Second) // the counters run on with no daemon
	d2 := startServe(t, bin, dir, "--on-shutdown", "stop")
	awaitServing(t, c, d2)
	for i, v := range vs {
		m, code := capsuleCall(t, c, v.capsule, "alice", "read_process_logs", map[string]any{"id": v.id, "stream": "stdout", "cursor": v.cursor})
		if code != "" {
			b, _ := json.Marshal(map[string]any{"id": v.id, "stream": "stdout", "cursor": v.cursor})
			_, err := c.Call(context.Background(), api.CallRequest{Capsule: v.capsule, Tool: "read_process_logs", Input: b, Principal: "alice"})
			t.Fatalf("%s: read %s with its cursor from before the crash: %s: %v (log:\n%s)", v.capsule, v.id, code, err, readDaemonLog(t, dir))
		}
		s, _ := m["stdout"].(string)
		// 2 s at 10 lines/s with no daemon (fewer on a loaded machine, but
		// the restart itself takes longer than one line).
		if last := counterLines(t, "after the crash, from the old cursor", mark, s, before[i]+1); last <= before[i] {
			t.Fatalf("%s %s: no line after the cursor: it did not print while no daemon ran", v.capsule, v.id)
		}
		if _, code := capsuleCall(t, c, v.capsule, "mallory", "read_process_logs", map[string]any{"id": v.id}); code != "no-such-process" {
			t.Fatalf("another principal reading %s: %q, want no-such-process", v.id, code)
		}
		full := readAllLogsOf(t, c, v.capsule, "alice", v.id)
		counterLines(t, "the whole stream", mark, full, 1)
	}
}

// ociShellCapsule copies the bundled shell capsule's module under a
// manifest asking for the OCI backend and the busybox profile.
func ociShellCapsule(t testing.TB, dir string) string {
	t.Helper()
	src, err := os.ReadFile("../../capsules/shell/Capsule.toml")
	if err != nil {
		t.Fatal(err)
	}
	m := strings.Replace(string(src), `name = "shell"`, `name = "shelloci"`, 1)
	m = strings.Replace(m, `backend = "bwrap"`, "backend = \"oci\"\nprofile = \"busybox\"", 1)
	caps := filepath.Join(dir, "shelloci")
	os.MkdirAll(caps, 0o755)
	os.WriteFile(filepath.Join(caps, "Capsule.toml"), []byte(m), 0o644)
	copyFile(t, "../../capsules/shell/shell.wasm", filepath.Join(caps, "shell.wasm"))
	return caps
}

// ociDaemonDir builds the binary and a daemon directory whose config
// enables the OCI backend with a busybox profile in a user namespace and
// a freshly built capsule-oci-init, serving the shell capsule's module as
// "shelloci"; withBwrap also enables bwrap and serves the bundled shell
// capsule on it. It skips loudly without root, runc or busybox.
func ociDaemonDir(t *testing.T, withBwrap bool) (bin, dir string) {
	t.Helper()
	skipSameBinary(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP LOUDLY: OCI containers need root (CI runs as root)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("SKIP LOUDLY: runc not installed (apt-get install runc)")
	}
	root, err := rootfs.Cached(rootfs.DefaultBusybox, filepath.Join(os.TempDir(), "capsule-test-cache"))
	if err != nil {
		t.Skipf("SKIP LOUDLY: busybox rootfs: %v (apt-get install busybox-static)", err)
	}
	bin = builtBinary(t)
	dir = t.TempDir()
	os.Chmod(dir, 0o755) // the container's user-namespaced root reaches its workspace
	initPath := filepath.Join(dir, "capsule-oci-init")
	if out, err := exec.Command("gcc", "-static", "-Os", "-o", initPath, "../../sandbox/oci/init/capsule-oci-init.c").CombinedOutput(); err != nil {
		t.Fatalf("build capsule-oci-init: %v\n%s", err, out)
	}
	caps := ociShellCapsule(t, dir)
	capsules, enabled := fmt.Sprintf("%q", caps), `"oci"`
	if withBwrap {
		shell, err := filepath.Abs("../../capsules/shell")
		if err != nil {
			t.Fatal(err)
		}
		capsules, enabled = fmt.Sprintf("%q, %q", caps, shell), `"oci", "bwrap"`
	}
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(fmt.Sprintf(`bundled = false
capsules = [%s]
[backends]
enabled = [%s]
[backends.oci]
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
`, capsules, enabled, initPath, root)), 0o600)
	return bin, dir
}

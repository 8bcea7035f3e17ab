package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/api"
)

// TestDurableKeepExited: a graceful stop with the keep policy leaves no
// less than a crash. An exited, unreleased persistent process keeps its
// ID, exit and output across SIGTERM: once with a running process (the
// keeper runs on), once with nothing running (the keeper exits and the
// next one recovers the records). The hammer found the IDs of exited
// processes pointing nowhere after a SIGTERM restart.
func TestDurableKeepExited(t *testing.T) {
	skipSameBinary(t)
	bin := builtBinary(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), nil, 0o600)
	mark := fmt.Sprintf("keepexited-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	sigterm := func(d *daemonProc) {
		t.Helper()
		endServe(t, d)
		if d.err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", d.err)
		}
	}
	d := startServe(t, bin, dir)
	awaitServing(t, c, d)
	spawn := func(cmd string) string {
		t.Helper()
		m, code := shellCall(t, c, "alice", "spawn_background_process", map[string]any{"command": cmd})
		if code != "" {
			t.Fatalf("spawn: %s", code)
		}
		id, _ := m["id"].(string)
		return id
	}
	exited := spawn("echo " + mark + "-done; exit 3")
	counter := spawn(fmt.Sprintf("while true; do echo %s; sleep 0.2; done", mark))
	if st := processExit(t, c, "alice", exited); st != "3" {
		t.Fatalf("exit before the restart: %q, want 3", st)
	}
	check := func(when string) {
		t.Helper()
		if st := processExit(t, c, "alice", exited); st != "3" {
			t.Fatalf("%s: the exited process: %q, want exit 3", when, st)
		}
		if out := readAllLogs(t, c, "alice", exited); out != mark+"-done\n" {
			t.Fatalf("%s: the exited process's output %q, want %q", when, out, mark+"-done\n")
		}
	}
	sigterm(d)
	d = startServe(t, bin, dir)
	awaitServing(t, c, d)
	check("after SIGTERM with the keeper running on")
	if _, code := shellCall(t, c, "alice", "kill_process", map[string]any{"id": counter, "grace_ms": 0}); code != "" {
		t.Fatalf("kill: %s", code)
	}
	sigterm(d) // nothing runs: the keeper exits
	d = startServe(t, bin, dir, "--on-shutdown", "stop")
	awaitServing(t, c, d)
	check("after SIGTERM with the keeper gone")
	if st := processExit(t, c, "alice", counter); st != "signal 9" {
		t.Fatalf("the killed counter after the restarts: %q, want signal 9", st)
	}
	endServe(t, d)
	waitNoMarked(t, mark, 30*time.Second)
	waitNoMarked(t, dir, 30*time.Second)
}

//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// TestServeDamagedJournal is the corrupt-journal fault at the
// serve level, on the built binary: persistent processes are kept across a
// kill -9, the journal is then cut to its two meta pages, and
//   - serve refuses to start, naming the file and the flag that salvages,
//     and leaves the kept processes alone (the operator may restore a
//     backup instead);
//   - serve --salvage-journal starts, keeps the damaged file aside, and
//     ends the processes no readable record owns: none is left running
//     that nothing owns, and their IDs answer no-such-process.
func TestServeDamagedJournal(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), nil, 0o600)
	mark := fmt.Sprintf("damaged-journal-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	d1 := startServe(t, bin, dir)
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(t, c, d1)
	var ids []string
	for range 3 {
		m, code := shellCall(t, c, "alice", "spawn_background_process", map[string]any{"command": fmt.Sprintf(`while true; do echo %s; sleep 0.2; done`, mark)})
		if code != "" {
			t.Fatalf("spawn: %s", code)
		}
		id, _ := m["id"].(string)
		ids = append(ids, id)
	}
	waitMarked(t, mark, 3)
	d1.cmd.Process.Signal(syscall.SIGKILL)
	<-d1.exited

	jpath := filepath.Join(dir, "state", "journal.db")
	if err := os.Truncate(jpath, 2*4096); err != nil {
		t.Fatal(err)
	}
	d2 := startServe(t, bin, dir)
	select {
	case <-d2.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("serve on a damaged journal neither refused nor served within 60 s")
	}
	log := readDaemonLog(t, dir)
	if d2.err == nil || !strings.Contains(log, jpath) || !strings.Contains(log, "--salvage-journal") {
		t.Fatalf("serve on a damaged journal: exit %v; want a refusal naming %s and --salvage-journal; log:\n%s", d2.err, jpath, log)
	}
	// Each shell (and its bwrap) carries the mark, and so does a shell's
	// fork for an instant: at least the three shells are still there.
	if n := len(withMarker(mark)); n < 3 {
		t.Fatalf("a refused start touched the kept processes: %d marked left", n)
	}

	d3 := startServe(t, bin, dir, "--salvage-journal", "--on-shutdown", "stop")
	awaitServing(t, c, d3)
	log = readDaemonLog(t, dir)
	if !strings.Contains(log, "journal salvaged") {
		t.Fatalf("no salvage report in the log:\n%s", log)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "state", "journal.db.*"))
	if len(aside) == 0 {
		t.Fatalf("the damaged journal was not kept aside (state: %v)", lsState(dir))
	}
	if n := waitMarked(t, mark, 0); n != 0 { // no record owns them: terminated, never left running
		t.Fatalf("%d left", n)
	}
	for _, id := range ids {
		if _, code := shellCall(t, c, "alice", "read_process_logs", map[string]any{"id": id}); code != "no-such-process" {
			t.Fatalf("status of %s after the salvage: %q, want no-such-process", id, code)
		}
	}
	if m, code := shellCall(t, c, "alice", "spawn_background_process", map[string]any{"command": "sleep 30"}); code != "" || m["id"] == "" {
		t.Fatalf("spawn after the salvage: %v %s", m, code)
	}
}

// TestSpillDiskFull is the full disk while spilling, on the built
// binary: the keepers' directory (where output spills) is a 4 MiB tmpfs and a persistent process
// writes 15 MB with a 64 KiB ring. Reading it all from the first byte,
// every byte is either read or counted in bytes_dropped (no silent gap);
// what the disk took before it filled is still read (from the first line)
// and so is the ring (to the last line); and the daemon still serves.
func TestSpillDiskFull(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	dir := t.TempDir()
	keepers := filepath.Join(dir, "state", "keeper") // where the output logs spill
	os.MkdirAll(keepers, 0o700)
	if err := syscall.Mount("tmpfs", keepers, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Skipf("SKIP: cannot mount a small tmpfs to fill (%v): needs root (CI runs as root)", err)
	}
	t.Cleanup(func() { syscall.Unmount(keepers, syscall.MNT_DETACH) })
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte("[processes]\nlog_ring_bytes = 65536\n"), 0o600)
	d := startServe(t, bin, dir, "--on-shutdown", "stop")
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", readDaemonLog(t, dir))
		}
	})
	awaitServing(t, c, d)
	const n = 2000000 // seq 1 n: 14,888,896 bytes
	want := 0
	for i, w := 1, 1; i <= n; i, w = i*10, w+1 {
		want += (min(i*10, n+1) - i) * (w + 1)
	}
	m, code := shellCall(t, c, "alice", "spawn_background_process", map[string]any{"command": fmt.Sprintf("seq 1 %d", n)})
	if code != "" {
		t.Fatalf("spawn: %s", code)
	}
	id, _ := m["id"].(string)
	processExit(t, c, "alice", id)
	var text strings.Builder
	dropped, cursor := 0, ""
	for i := 0; ; i++ {
		in := map[string]any{"id": id, "stream": "stdout", "max_bytes": 1 << 20}
		if cursor != "" {
			in["cursor"] = cursor
		}
		m, code := shellCall(t, c, "alice", "read_process_logs", in)
		if code != "" {
			b, _ := json.Marshal(in)
			_, err := c.Call(context.Background(), api.CallRequest{Capsule: "shell", Tool: "read_process_logs", Input: b, Principal: "alice"})
			t.Fatalf("read %d (after %d bytes, %d dropped): %s: %v", i, text.Len(), dropped, code, err)
		}
		s, _ := m["stdout"].(string)
		bd, _ := m["bytes_dropped"].(float64)
		text.WriteString(s)
		dropped += int(bd)
		cursor, _ = m["cursor"].(string)
		if s == "" && bd == 0 {
			break
		}
		if i > 200 {
			t.Fatal("no end of the log after 200 reads")
		}
	}
	got := text.String()
	t.Logf("read %d bytes, %d counted as dropped, of %d written", len(got), dropped, want)
	if len(got)+dropped != want {
		t.Fatalf("read %d + dropped %d = %d, want %d: bytes lost without being counted", len(got), dropped, len(got)+dropped, want)
	}
	if dropped == 0 {
		t.Fatalf("nothing dropped though 15 MB cannot fit a 4 MiB disk: the test did not fill it")
	}
	if len(got) < 2<<20 {
		t.Fatalf("only %d bytes readable: what the spill took before the disk filled was thrown away", len(got))
	}
	if !strings.HasPrefix(got, "1\n2\n") || !strings.HasSuffix(got, fmt.Sprintf("\n%d\n", n)) {
		t.Fatalf("read text runs %.20q ... %.20q, want the first and the last lines", got, got[max(0, len(got)-20):])
	}
	if _, code := shellCall(t, c, "alice", "list_processes", map[string]any{}); code != "" {
		t.Fatalf("list after the disk filled: %s", code)
	}
}

// waitMarked polls until at least n processes carry mark (exactly none
// for n == 0), bounded, and returns how many do.
func waitMarked(t testing.TB, mark string, n int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := len(withMarker(mark))
		if (n == 0 && got == 0) || (n > 0 && got >= n) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes carry %s after 30 s, want %d: %v", got, mark, n, withMarker(mark))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readDaemonLog(t testing.TB, dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func lsState(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "state", "*"))
	return m
}

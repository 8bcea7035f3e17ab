//go:build !leanclient

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// TestTerminalRestartKill9: a terminal's screen after a kill -9 of serve
// and a restart equals the screen before (text, cursor, title, modes),
// after a resize too, and the terminal still takes keys: the keeper held
// the PTY master (for OCI: the one runc sent over the console socket)
// and the output log, the journal the size history the new daemon's
// screen replays. On the built binary, for the shell capsule in bwrap and
// in an OCI container (real runc, busybox).
func TestTerminalRestartKill9(t *testing.T) {
	t.Run("bwrap", func(t *testing.T) {
		skipSameBinary(t)
		bin, dir := builtBinary(t), t.TempDir()
		os.WriteFile(filepath.Join(dir, "capsule-host.toml"), nil, 0o600)
		testTerminalRestart(t, bin, dir, "shell")
	})
	t.Run("oci", func(t *testing.T) {
		bin, dir := ociDaemonDir(t, false)
		testTerminalRestart(t, bin, dir, "shelloci")
	})
}

func testTerminalRestart(t *testing.T, bin, dir, capsule string) {
	mark := fmt.Sprintf("term-restart-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	d1 := startServe(t, bin, dir, "--on-shutdown", "keep")
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(t, c, d1)
	// The mark in the command line lets stopMarked find what a failed run
	// leaves.
	m, code := capsuleCall(t, c, capsule, "alice", "start_terminal", map[string]any{
		"command": "PS1='$ ' sh -i; exit $? # " + mark, "rows": 24, "cols": 80, "settle_ms": 0})
	if code != "" {
		t.Fatalf("start_terminal: %s", code)
	}
	id, _ := m["id"].(string)
	typeIn := func(text string) {
		t.Helper()
		if _, code := capsuleCall(t, c, capsule, "alice", "terminal_type", map[string]any{"id": id, "text": text, "submit": true, "settle_ms": 0}); code != "" {
			t.Fatalf("terminal_type %q: %s", text, code)
		}
	}
	typeIn("printf '\\033]2;title-x\\007'; echo hello-$((6*7))")
	awaitScreenText(t, c, id, "(?m)hello-42\n\\$$") // the prompt: see TestAttachInTmux
	if err := c.Resize(context.Background(), id, 30, 100); err != nil {
		t.Fatal(err)
	}
	typeIn("stty size")
	before := awaitScreenText(t, c, id, "(?m)30 100\n\\$$")
	if before.Title != "title-x" || before.Rows != 30 || before.Cols != 100 {
		t.Fatalf("screen before: %+v", before)
	}
	d1.cmd.Process.Signal(syscall.SIGKILL)
	<-d1.exited
	d2 := startServe(t, bin, dir, "--on-shutdown", "stop")
	awaitServing(t, c, d2)
	after := awaitScreenText(t, c, id, "(?m)30 100\n\\$$")
	if !reflect.DeepEqual(screenState(before), screenState(after)) {
		t.Fatalf("the screen changed across the kill -9:\nbefore %+v\nafter  %+v", screenState(before), screenState(after))
	}
	typeIn("echo after-$((6*7))")
	awaitScreenText(t, c, id, "(?m)after-42$")
	// End it through the daemon, and the daemon (stopping what is left),
	// before the directory goes: nothing of the test outlives it.
	if _, code := capsuleCall(t, c, capsule, "alice", "kill_process", map[string]any{"id": id}); code != "" {
		t.Fatalf("kill_process: %s", code)
	}
	d2.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d2.exited:
	case <-time.After(90 * time.Second):
		t.Fatal("serve did not exit within 90 s of SIGTERM")
	}
}

// screenState is what a person sees of a screen (not its cursor token).
func screenState(s api.Screen) api.Screen {
	s.Cursor, s.SkippedBytes, s.BehindBytes = "", 0, 0
	return s
}

// awaitScreenText polls the operator's screen until it has rendered
// everything (behind 0) and its text matches re, bounded.
func awaitScreenText(t *testing.T, c *api.Client, id, re string) api.Screen {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	var s api.Screen
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err = c.Screen(ctx, id, 0)
		cancel()
		if err == nil && s.BehindBytes == 0 && rx.MatchString(strings.Join(s.Lines, "\n")) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("screen never matched %q (%v):\n%s", re, err, strings.Join(s.Lines, "\n"))
	return s
}

//go:build !leanclient

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host/config"
)

// startTermDaemon is a daemon serving testcap12 (the 1.2.0 capsule).
func startTermDaemon(t *testing.T) *testDaemon {
	t.Helper()
	dir, err := filepath.Abs("../../capsules/testcap12")
	if err != nil {
		t.Fatal(err)
	}
	return startDaemon(t, func(c *config.Config) { c.Capsules = []string{dir} })
}

// spawnTerminal starts bash on a terminal as alice through testcap12.
func (d *testDaemon) spawnTerminal(t *testing.T, rows, cols int) string {
	t.Helper()
	return d.spawnTermCmd(t, rows, cols, "/bin/bash", "--norc", "--noprofile", "-i")
}

// spawnTermCmd starts cmd on a terminal as alice through testcap12 (PS1
// "$ ") and stops it in t.Cleanup.
func (d *testDaemon) spawnTermCmd(t *testing.T, rows, cols int, cmd string, args ...string) string {
	t.Helper()
	in, _ := json.Marshal(map[string]any{
		"request": map[string]any{"cmd": cmd, "args": args,
			"env": []map[string]string{{"key": "PS1", "value": "$ "}}},
		"terminal": map[string]any{"rows": rows, "cols": cols},
	})
	out, errOut, code := d.cli(t, "call", "testcap12", "term_spawn", string(in), "--principal", "alice", "--json")
	if code != 0 {
		t.Fatalf("term_spawn: exit %d: %s", code, errOut)
	}
	var res api.CallResponse
	var v struct {
		OK string `json:"ok"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || json.Unmarshal(res.Output, &v) != nil || v.OK == "" {
		t.Fatalf("term_spawn: %s", out)
	}
	t.Cleanup(func() { d.cli(t, "stop", v.OK, "--grace", "200ms") })
	return v.OK
}

// TestTerminalVerbs: send, screen, wait, signal and rm against a real
// bash on a terminal, by full ID and by prefix, and their refusals.
func TestTerminalVerbs(t *testing.T) {
	d := startTermDaemon(t)
	id := d.spawnTerminal(t, 24, 80)
	pre := id[:10]
	d.must(t, "wait", pre, "--input", "--timeout", "20s")
	// ps shows the whole command line and the time left before reaping.
	if out := d.must(t, "ps"); !strings.Contains(out, "/bin/bash --norc --noprofile -i") || !strings.Contains(out, "REAP") || !strings.Contains(out, "idle ") {
		t.Errorf("ps:\n%s", out)
	}
	var p api.Process
	if err := json.Unmarshal([]byte(d.must(t, "inspect", pre, "--json")), &p); err != nil || p.Terminal == nil || p.Terminal.Rows != 24 || p.ReapInMS == nil {
		t.Errorf("inspect --json: %+v (%v)", p, err)
	}
	var s api.Screen
	if err := json.Unmarshal([]byte(d.must(t, "screen", id, "--json")), &s); err != nil || s.Rows != 24 || s.Cols != 80 || s.Cursor == "" {
		t.Fatalf("screen --json: %+v (%v)", s, err)
	}
	d.must(t, "send", pre, "-l", "echo hi-$((6*7))", "--enter")
	if out := d.must(t, "wait", pre, "--for", `hi-42\r?\n`, "--cursor", s.Cursor, "--timeout", "20s"); !strings.HasPrefix(out, "output-matched\ncursor ") {
		t.Errorf("wait --for: %q", out)
	}
	waitFor(t, func() bool { return strings.Contains(d.must(t, "screen", pre), "hi-42") })
	d.must(t, "send", pre, "C-u", "e", "x", "i", "t", "Space", "7", "Enter")
	if out := d.must(t, "wait", pre, "--timeout", "20s"); !strings.HasPrefix(out, "exited") {
		t.Errorf("wait for exit: %q", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"send", pre, "Entr"}, `"Entr"`},
		{[]string{"screen", id[:5]}, "at least 8"},
		{[]string{"signal", pre, "bogus"}, "bogus"},
		{[]string{"wait", pre, "--for", "x", "--input"}, "at most one"},
	} {
		if _, errOut, code := d.cli(t, tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want a failure naming %s", tc.args, code, errOut, tc.want)
		}
	}
	d.must(t, "rm", pre)
	if _, errOut, code := d.cli(t, "screen", id); code == 0 || !strings.Contains(errOut, "no such process") {
		t.Errorf("screen after rm: exit %d %q", code, errOut)
	}

	// signal, and rm refusing a running process.
	id2 := d.spawnTerminal(t, 10, 40)
	if _, errOut, code := d.cli(t, "rm", id2); code == 0 || !strings.Contains(errOut, "running") {
		t.Errorf("rm of a running process: exit %d %q", code, errOut)
	}
	d.must(t, "signal", id2, "SIGKILL")
	d.must(t, "wait", id2, "--timeout", "20s")
	d.must(t, "rm", id2)
}

// TestAttachInTmux drives `capsule-host attach` in a real terminal (tmux):
// keystrokes reach the process, a resize of the window reaches it, the
// detach keys leave it running, and a new attach shows the screen again.
func TestAttachInTmux(t *testing.T) {
	skipSameBinary(t)
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("SKIP: tmux is not installed (make test installs it)")
	}
	bin := builtBinary(t)
	d := startTermDaemon(t)
	id := d.spawnTerminal(t, 24, 80)
	tdir := t.TempDir()
	sock := filepath.Join(tdir, "tmux.sock")
	tm := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	// The shell around attach keeps the pane (and what attach printed) if
	// attach ends early.
	attach := "sh -c '" + bin + " attach " + id[:12] + " --socket " + d.sock + "; echo attach-exit-$?; sleep 60'"
	tm("-f", os.DevNull, "new-session", "-d", "-s", "a", "-x", "100", "-y", "30", attach)
	t.Cleanup(func() { exec.Command(tmux, "-S", sock, "kill-server").Run() })
	pane := func() string { return tm("capture-pane", "-p", "-t", "a") }
	waitPane := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(pane(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the pane never showed %q:\n%s", what, want, pane())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The window size reached the process when attach started (before
	// it painted the screen, which shows the prompt).
	waitPane("the first paint", "$")
	tm("send-keys", "-t", "a", "-l", "stty size")
	tm("send-keys", "-t", "a", "Enter")
	waitPane("stty size through attach", "30 100")
	tm("resize-window", "-t", "a", "-x", "90", "-y", "25")
	tm("send-keys", "-t", "a", "-l", "stty size; echo marker-$((3*3))")
	tm("send-keys", "-t", "a", "Enter")
	waitPane("stty size after resize", "25 90")
	waitPane("typed command", "marker-9")
	// Detach: the process keeps running.
	tm("send-keys", "-t", "a", "C-p", "C-q")
	waitPane("detach", "[detached")
	if out, _, code := d.cli(t, "inspect", id); code != 0 || !strings.Contains(out, "running") {
		t.Errorf("after detach: inspect exit %d:\n%s", code, out)
	}
	// A new attach (in a second tmux server: a server just killed may
	// still hold the first socket) paints the screen as it was.
	tm("kill-server")
	sock = filepath.Join(tdir, "tmux2.sock")
	t.Cleanup(func() { exec.Command(tmux, "-S", filepath.Join(tdir, "tmux2.sock"), "kill-server").Run() })
	tm("-f", os.DevNull, "new-session", "-d", "-s", "a", "-x", "90", "-y", "25", attach)
	waitPane("re-attach", "marker-9")
}

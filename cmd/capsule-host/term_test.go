//go:build !leanclient

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// screenCursor is the read-since cursor up to which the screen rendered
// the output: `wait --for ... --cursor` from it sees only what follows.
func (d *testDaemon) screenCursor(t *testing.T, id string) string {
	t.Helper()
	var s api.Screen
	if err := json.Unmarshal([]byte(d.must(t, "screen", id, "--json")), &s); err != nil || s.Cursor == "" {
		t.Fatalf("screen --json: %+v (%v)", s, err)
	}
	return s.Cursor
}

// tmuxPane is one tmux server with one session "a" running a command in
// a real terminal: what a person at a keyboard sees and types.
type tmuxPane struct {
	t          *testing.T
	tmux, sock string
}

// newTmuxPane starts a server on its own socket with a cols×rows window
// running cmd, and kills it in t.Cleanup.
func newTmuxPane(t *testing.T, tmux, sock string, cols, rows int, cmd string) *tmuxPane {
	t.Helper()
	p := &tmuxPane{t: t, tmux: tmux, sock: sock}
	p.run("-f", os.DevNull, "new-session", "-d", "-s", "a", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), cmd)
	t.Cleanup(func() { exec.Command(tmux, "-S", sock, "kill-server").Run() })
	return p
}

func (p *tmuxPane) run(args ...string) string {
	p.t.Helper()
	out, err := exec.Command(p.tmux, append([]string{"-S", p.sock}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// keys is tmux send-keys to the pane, in one write to its terminal.
func (p *tmuxPane) keys(keys ...string) {
	p.t.Helper()
	p.run(append([]string{"send-keys", "-t", "a"}, keys...)...)
}

func (p *tmuxPane) text() string { return p.run("capture-pane", "-p", "-t", "a") }

// await polls the pane until it shows want, bounded.
func (p *tmuxPane) await(what, want string) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.text(), want) {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: the pane never showed %q:\n%s", what, want, p.text())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAttachInTmux drives `capsule-host attach` in a real terminal (tmux):
// keystrokes reach the process, a resize of the window reaches it, the
// detach keys leave it running, and a new attach shows the screen again;
// custom detach keys (a prefix of them not followed through is typed, and
// what was typed with them in one read is sent before detaching);
// --read-only shows output but sends neither keystrokes nor its window
// size; an invalid --detach-keys is refused naming it.
func TestAttachInTmux(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("SKIP: tmux is not installed (make test installs it)")
	}
	bin := builtBinary(t)
	d := startTermDaemon(t)
	id := d.spawnTerminal(t, 24, 80)
	tdir := t.TempDir()
	// The shell around attach keeps the pane (and what attach printed) if
	// attach ends early. Each attach runs in a tmux server of its own: a
	// server just killed may still hold its socket.
	attach := func(flags string) string {
		return "sh -c '" + bin + " attach " + id[:12] + " --socket " + d.sock + " " + flags + "; echo attach-exit-$?; sleep 60'"
	}
	p := newTmuxPane(t, tmux, filepath.Join(tdir, "tmux1.sock"), 100, 30, attach(""))
	// The window size reached the process when attach started (before
	// it painted the screen, which shows the prompt).
	p.await("the first paint", "$")
	p.keys("-l", "stty size")
	p.keys("Enter")
	// The prompt after it too: readline re-sets the window size it read
	// as it starts a line, which could undo a resize made in that instant.
	p.await("stty size through attach", "30 100\n$")
	p.run("resize-window", "-t", "a", "-x", "90", "-y", "25")
	p.keys("-l", "stty size; echo marker-$((3*3))")
	p.keys("Enter")
	p.await("stty size after resize", "25 90")
	p.await("typed command", "marker-9")
	// Detach: the process keeps running.
	p.keys("C-p", "C-q")
	p.await("detach", "[detached")
	p.await("attach's exit status", "attach-exit-0")
	if out, _, code := d.cli(t, "inspect", id); code != 0 || !strings.Contains(out, "running") {
		t.Errorf("after detach: inspect exit %d:\n%s", code, out)
	}
	p.run("kill-server")

	// A new attach paints the screen as it was; its detach keys are
	// ctrl-a,d. A ctrl-a not followed by d is typed (readline: to the
	// start of the line, so "cho" becomes "echo"); text typed in the same
	// write as the detach keys reaches the process before attach ends.
	p = newTmuxPane(t, tmux, filepath.Join(tdir, "tmux2.sock"), 90, 25, attach("--detach-keys ctrl-a,d"))
	p.await("re-attach", "marker-9")
	p.keys("-l", "cho prefix-$((2+3))")
	p.keys("C-a", "e", "Enter")
	p.await("a detach-key prefix typed as it was", "prefix-5")
	cur := d.screenCursor(t, id)
	p.keys("C-u", "echo last-$((8*8))", "Enter", "C-a", "d")
	p.await("custom detach keys", "[detached")
	p.await("attach's exit status", "attach-exit-0")
	if out, errOut, _ := d.cli(t, "wait", id, "--for", `last-64\r?\n`, "--cursor", cur, "--timeout", "20s"); !strings.HasPrefix(out, "output-matched") {
		t.Errorf("the line typed in the same write as the detach keys never ran: %q %s\n%s", out, errOut, d.must(t, "screen", id))
	}
	if out, _, code := d.cli(t, "inspect", id); code != 0 || !strings.Contains(out, "running") {
		t.Errorf("after the custom detach: inspect exit %d:\n%s", code, out)
	}
	p.run("kill-server")

	// --read-only in a window of another size: output reaches the pane,
	// keystrokes and the size do not reach the process.
	p = newTmuxPane(t, tmux, filepath.Join(tdir, "tmux3.sock"), 70, 20, attach("--read-only"))
	p.await("read-only paint", "last-64")
	d.must(t, "send", id, "-l", "echo from-cli-$((4*4))", "--enter")
	p.await("output followed read-only", "from-cli-16")
	p.keys("-l", "echo typed-$((5*5))")
	p.keys("Enter", "C-p", "C-q")
	p.await("read-only detach", "[detached")
	// The typed line was dropped before the detach keys were read (one
	// input loop, in order). Had it been written, bash would run it before
	// the next command, whose output is awaited here.
	cur = d.screenCursor(t, id)
	d.must(t, "send", id, "-l", "echo after-$((7*7))", "--enter")
	if out := d.must(t, "wait", id, "--for", `after-49\r?\n`, "--cursor", cur, "--timeout", "20s"); !strings.HasPrefix(out, "output-matched") {
		t.Errorf("wait for after-49: %q", out)
	}
	waitFor(t, func() bool { return strings.Contains(d.must(t, "screen", id), "after-49") })
	if scr := d.must(t, "screen", id); strings.Contains(scr, "typed-") {
		t.Errorf("a read-only attach's keystrokes reached the process:\n%s", scr)
	}
	var info api.Process
	if err := json.Unmarshal([]byte(d.must(t, "inspect", id, "--json")), &info); err != nil || info.Terminal == nil || info.Terminal.Rows != 25 || info.Terminal.Cols != 90 {
		t.Errorf("after a read-only attach in a 70x20 window: terminal %+v (%v), want 25x90 kept", info.Terminal, err)
	}

	// An invalid detach-key spec is refused before anything connects.
	for _, spec := range []string{"ctrl-1", "ctrl-", "ab", "", "ctrl-p,,ctrl-q"} {
		_, errOut, code := d.cli(t, "attach", id, "--detach-keys", spec)
		if code == 0 || !strings.Contains(errOut, "--detach-keys") {
			t.Errorf("--detach-keys %q: exit %d, stderr %q; want a refusal naming --detach-keys", spec, code, errOut)
		}
	}
}

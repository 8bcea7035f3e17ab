package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
)

// shellScreen is the terminal tools' answer (the fields the tests read).
type shellScreen struct {
	ID              string `json:"id"`
	Running         bool   `json:"running"`
	Screen          string `json:"screen"`
	Rows            uint16 `json:"rows"`
	Cols            uint16 `json:"cols"`
	AltScreen       bool   `json:"alt_screen"`
	WaitingForInput *bool  `json:"waiting_for_input"`
	Cursor          string `json:"cursor"`
}

// newTerminalEnv is an env serving the shell capsule, skipped loudly when
// its built module predates the terminal tools.
func newTerminalEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, "shell")
	c, _ := e.h.Capsule("shell")
	if !slices.ContainsFunc(c.Tools(), func(tl host.ToolSpec) bool { return tl.Name == "start_terminal" }) {
		t.Skip("SKIPPED LOUDLY: capsules/shell/shell.wasm predates the terminal tools (capsules/shell/terminal.go): run capsules/build.sh shell")
	}
	return e
}

// TestShellTerminalTools drives the shell capsule's terminal tools as an
// agent would, in the bwrap sandbox: python3's REPL on a terminal, typed
// input, a prompt waited for, keys, resize, and wait_for on a pipe
// process too.
func TestShellTerminalTools(t *testing.T) {
	e := newTerminalEnv(t)
	var s shellScreen
	e.call("alice", "shell", "start_terminal", map[string]any{"command": "exec python3 -q", "rows": 20, "cols": 70, "settle_ms": 500}, &s)
	t.Cleanup(func() { e.call("alice", "shell", "kill_process", map[string]any{"id": s.ID, "grace_ms": 500}, nil) })
	id := s.ID
	var w map[string]any
	e.call("alice", "shell", "wait_for", map[string]any{"id": id, "input": true, "timeout_ms": 15000}, &w)
	if w["fired"] != "input-wait" || !strings.Contains(w["screen"].(string), ">>>") {
		t.Fatalf("python3 prompt: %v", w)
	}
	e.call("alice", "shell", "terminal_type", map[string]any{"id": id, "text": "print(6*7)", "submit": true}, &s)
	e.call("alice", "shell", "wait_for", map[string]any{"id": id, "regex": `42\r?\n>>> `, "cursor": w["cursor"], "timeout_ms": 15000}, &w)
	if w["fired"] != "output-matched" || !strings.Contains(w["screen"].(string), "42") {
		t.Errorf("after print(6*7): %v", w)
	}
	e.call("alice", "shell", "terminal_resize", map[string]any{"id": id, "rows": 30, "cols": 90}, &s)
	e.call("alice", "shell", "terminal_type", map[string]any{"id": id, "text": "import shutil; print(shutil.get_terminal_size())", "submit": true, "settle_ms": 500}, &s)
	if s.Rows != 30 || s.Cols != 90 || !strings.Contains(s.Screen, "columns=90, lines=30") {
		t.Errorf("after resize: %dx%d\n%s", s.Rows, s.Cols, s.Screen)
	}
	e.call("alice", "shell", "terminal_send_keys", map[string]any{"id": id, "keys": []map[string]string{{"key": "Up"}}}, &s)
	if !strings.HasSuffix(strings.TrimRight(s.Screen, " \n"), ">>> import shutil; print(shutil.get_terminal_size())") {
		t.Errorf("Up did not recall the last line:\n%s", s.Screen)
	}
	e.toolErr("alice", "shell", "terminal_send_keys", map[string]any{"id": id, "keys": []map[string]string{{"key": "Entr"}}}, "Entr")
	e.toolErr("alice", "shell", "wait_for", map[string]any{"id": id, "input": true, "exit": true}, "exactly one")
	e.call("alice", "shell", "terminal_send_keys", map[string]any{"id": id, "keys": []map[string]string{{"key": "C-u"}, {"key": "C-d"}}}, &s)
	e.call("alice", "shell", "wait_for", map[string]any{"id": id, "exit": true, "timeout_ms": 15000}, &w)
	if w["fired"] != "exited" {
		t.Errorf("C-d: %v", w)
	}

	// wait_for serves pipe processes: a regex from a read_process_logs cursor.
	var sp struct {
		ID string `json:"id"`
	}
	e.call("alice", "shell", "spawn_background_process", map[string]any{"command": "sleep 0.2; echo ready-7; sleep 30"}, &sp)
	t.Cleanup(func() { e.call("alice", "shell", "kill_process", map[string]any{"id": sp.ID, "grace_ms": 500}, nil) })
	var lo struct {
		Cursor string `json:"cursor"`
	}
	e.call("alice", "shell", "read_process_logs", map[string]any{"id": sp.ID}, &lo)
	w = nil // Unmarshal into a map merges: start afresh
	e.call("alice", "shell", "wait_for", map[string]any{"id": sp.ID, "regex": `ready-\d`, "cursor": lo.Cursor, "timeout_ms": 15000}, &w)
	if w["fired"] != "output-matched" || w["screen"] != nil {
		t.Errorf("wait_for on a pipe process: %v", w)
	}
	e.toolErr("alice", "shell", "terminal_screen", map[string]any{"id": sp.ID}, "no terminal")
}

// wait_for without a cursor matches from the start of what the process
// still has (like read_process_logs), so output printed before the call
// counts: python3's first bytes (its prompt), a pipe process's line on
// either stream, a match spanning retained and new output; the cursor it
// returns waits for the next occurrence, and a stream that ended without
// a match answers at once.
func TestShellWaitForFromStart(t *testing.T) {
	e := newEnv(t, "shell")
	var s shellScreen
	e.call("alice", "shell", "start_terminal", map[string]any{"command": "exec python3 -q", "settle_ms": 500}, &s)
	t.Cleanup(func() { e.call("alice", "shell", "kill_process", map[string]any{"id": s.ID, "grace_ms": 500}, nil) })
	var w map[string]any
	e.call("alice", "shell", "wait_for", map[string]any{"id": s.ID, "input": true, "timeout_ms": 15000}, &w)
	w = nil
	e.call("alice", "shell", "wait_for", map[string]any{"id": s.ID, "regex": `^>>> `, "timeout_ms": 15000}, &w)
	if w["fired"] != "output-matched" {
		t.Errorf("the prompt printed before the call (python3's first bytes): %v", w)
	}

	var sp struct {
		ID string `json:"id"`
	}
	e.call("alice", "shell", "spawn_background_process", map[string]any{"keep_stdin_open": true,
		"command": "echo ready-1; echo warn-1 >&2; read x; printf ab; read y; echo cd; read z"}, &sp)
	t.Cleanup(func() { e.call("alice", "shell", "kill_process", map[string]any{"id": sp.ID, "grace_ms": 500}, nil) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		var lo struct {
			Stdout, Stderr string
		}
		e.call("alice", "shell", "read_process_logs", map[string]any{"id": sp.ID}, &lo)
		if strings.Contains(lo.Stdout, "ready-1") && strings.Contains(lo.Stderr, "warn-1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process never printed: %+v", lo)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w = nil
	e.call("alice", "shell", "wait_for", map[string]any{"id": sp.ID, "regex": `ready-\d\n`, "timeout_ms": 15000}, &w)
	if w["fired"] != "output-matched" || w["cursor"] == "" {
		t.Fatalf("a line printed before the call: %v", w)
	}
	next := w["cursor"]
	w = nil
	e.call("alice", "shell", "wait_for", map[string]any{"id": sp.ID, "regex": `ready-\d`, "cursor": next, "timeout_ms": 200}, &w)
	if w["timed_out"] != true {
		t.Errorf("after the returned cursor the same line matched again: %v", w)
	}
	w = nil
	e.call("alice", "shell", "wait_for", map[string]any{"id": sp.ID, "regex": `warn-1`, "stream": "stderr", "timeout_ms": 15000}, &w)
	if w["fired"] != "output-matched" {
		t.Errorf("stderr from its start: %v", w)
	}
	// "ab" is retained before the call; "cd" comes during it (or before:
	// either way the match spans the two writes).
	e.call("alice", "shell", "write_process_stdin", map[string]any{"id": sp.ID, "data": "1\n"}, nil)
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.try("alice", "shell", "write_process_stdin", map[string]any{"id": sp.ID, "data": "2\n"})
	}()
	w = nil
	e.call("alice", "shell", "wait_for", map[string]any{"id": sp.ID, "regex": `abcd\n`, "timeout_ms": 15000}, &w)
	if w["fired"] != "output-matched" {
		t.Fatalf("a match spanning retained and new output: %v", w)
	}
	var lo struct {
		Stdout string `json:"stdout"`
	}
	e.call("alice", "shell", "read_process_logs", map[string]any{"id": sp.ID, "stream": "stdout", "cursor": w["cursor"]}, &lo)
	if lo.Stdout != "" {
		t.Errorf("after the match's cursor: %q, want nothing (the match ends the output)", lo.Stdout)
	}
	e.call("alice", "shell", "write_process_stdin", map[string]any{"id": sp.ID, "data": "3\n", "close": true}, nil)
	e.call("alice", "shell", "wait_for", map[string]any{"id": sp.ID, "exit": true, "timeout_ms": 15000}, nil)
	w = nil
	e.call("alice", "shell", "wait_for", map[string]any{"id": sp.ID, "regex": `never printed`, "timeout_ms": 15000}, &w)
	if w["cannot_happen"] != true {
		t.Errorf("no match in an ended stream: %v", w)
	}
	e.toolErr("alice", "shell", "wait_for", map[string]any{"id": sp.ID, "regex": `(`}, `"("`)
}

// start_terminal without a command is an interactive shell (bash when the
// sandbox has it, else sh) on a terminal: its prompt waits for input, a
// submitted line runs with a tty as its input and job control on, the
// screen shows the result, and `exit 3` ends it with that code under the
// label "terminal: shell".
func TestShellTerminalInteractiveShell(t *testing.T) {
	e := newTerminalEnv(t)
	var s shellScreen
	e.call("alice", "shell", "start_terminal", map[string]any{"rows": 20, "cols": 60}, &s)
	t.Cleanup(func() { e.call("alice", "shell", "kill_process", map[string]any{"id": s.ID, "grace_ms": 500}, nil) })
	if s.ID == "" || s.Rows != 20 || s.Cols != 60 {
		t.Fatalf("start_terminal: %+v", s)
	}
	var w map[string]any
	e.call("alice", "shell", "wait_for", map[string]any{"id": s.ID, "input": true, "timeout_ms": 15000}, &w)
	if w["fired"] != "input-wait" {
		t.Fatalf("the shell's prompt: %v", w)
	}
	e.call("alice", "shell", "terminal_type", map[string]any{"id": s.ID, "submit": true,
		"text": `[ -t 0 ] && echo "tty-yes $(basename "$0") $((6*7))"; case $- in *m*) echo job-control;; esac`}, nil)
	w = nil
	e.call("alice", "shell", "wait_for", map[string]any{"id": s.ID, "regex": `job-control\r?\n`, "timeout_ms": 15000}, &w)
	scr, _ := w["screen"].(string)
	if w["fired"] != "output-matched" || !strings.Contains(scr, "tty-yes ") || !strings.Contains(scr, " 42") {
		t.Fatalf("a command typed into the shell: %v", w)
	}
	if !strings.Contains(scr, "tty-yes bash 42") && !strings.Contains(scr, "tty-yes sh 42") {
		t.Errorf("the shell is neither bash nor sh:\n%s", scr)
	}
	e.call("alice", "shell", "terminal_type", map[string]any{"id": s.ID, "text": "exit 3", "submit": true}, nil)
	w = nil
	e.call("alice", "shell", "wait_for", map[string]any{"id": s.ID, "exit": true, "timeout_ms": 15000}, &w)
	if w["fired"] != "exited" {
		t.Fatalf("exit 3: %v", w)
	}
	var ls struct {
		Processes []listedProc `json:"processes"`
	}
	e.call("alice", "shell", "list_processes", map[string]any{}, &ls)
	i := slices.IndexFunc(ls.Processes, func(p listedProc) bool { return p.ID == s.ID })
	if i < 0 {
		t.Fatalf("list_processes lacks %s: %+v", s.ID, ls)
	}
	if p := ls.Processes[i]; p.Label != "terminal: shell" || p.Exit == nil || p.Exit.ExitCode == nil || *p.Exit.ExitCode != 3 {
		t.Errorf("list_processes: %+v, want labelled \"terminal: shell\", exited 3", p)
	}
}

// listedProc is a list_processes entry (the fields the tests read).
type listedProc struct {
	ID    string `json:"id"`
	Label string `json:"label"`
	Exit  *struct {
		ExitCode *int32 `json:"exit_code"`
	} `json:"exit"`
}

package e2e

import (
	"slices"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/capsules/sdk/terminal"
)

// tc12 is tc for testcap12.
func tc12[T any](e *env, principal, tool string, in any) (T, uint64) {
	e.t.Helper()
	var r resp[T]
	inst := e.call(principal, "testcap12", tool, in, &r)
	if r.Error != nil {
		e.t.Fatalf("testcap12.%s(%s): %v", tool, mustJSON(e.t, in), r.Error)
	}
	return r.OK, inst
}

// TestTerminalTierThroughWasm drives capsule:process@1.2.0 from a real
// guest (testcap12, through the SDK's 1.2.0 bindings): a bash on a PTY,
// input-wait, submit, output-match from a cursor, snapshot, resize with
// stty, send-keys, status@1.2.0 next to status@1.1.0 on the same ID, and
// the refusals (unknown key, bad size, terminal calls on a pipe process).
func TestTerminalTierThroughWasm(t *testing.T) {
	e := newEnv(t, "testcap12")
	id, _ := tc12[string](e, "alice", "term_spawn", map[string]any{
		"request": map[string]any{"cmd": "/bin/bash", "args": []string{"--norc", "--noprofile", "-i"},
			"env": []map[string]string{{"key": "PS1", "value": "$ "}}},
		"terminal": map[string]any{"rows": 24, "cols": 80},
	})
	t.Cleanup(func() {
		var r resp[any]
		e.call("alice", "testcap12", "stop", map[string]any{"id": id, "grace_ms": 500}, &r)
	})
	wait := func(cond map[string]any) terminal.WaitResult {
		t.Helper()
		var r resp[terminal.WaitResult]
		e.call("alice", "testcap12", "wait_for", map[string]any{"id": id, "condition": cond, "timeout_ms": 20000}, &r)
		if r.Error != nil {
			var snap resp[terminal.Snapshot]
			e.call("alice", "testcap12", "term_snapshot", map[string]any{"id": id}, &snap)
			t.Fatalf("wait-for %v: %v; the screen:\n%s", cond, r.Error, strings.Join(snap.OK.Lines, "\n"))
		}
		return r.OK
	}
	w := wait(map[string]any{"kind": "input-wait"})
	if w.Fired != terminal.InputWait || w.Cursor == "" {
		t.Fatalf("input-wait at the prompt: %+v", w)
	}
	tc12[uint32](e, "alice", "term_submit", map[string]any{"id": id, "text": "echo hi-$((6*7))"})
	// Up to the next prompt: readline re-sets the window size it read as
	// it starts a line, which could undo the resize below.
	if w = wait(map[string]any{"kind": "output-matches", "cursor": w.Cursor, "regex": `(?s)hi-42\r?\n.*\$ `}); w.Fired != terminal.OutputMatched {
		t.Fatalf("output-matches: %+v", w)
	}
	snap, _ := tc12[terminal.Snapshot](e, "alice", "term_snapshot", map[string]any{"id": id, "scrollback": 10})
	if snap.Rows != 24 || snap.Cols != 80 || !slices.Contains(snap.Lines, "hi-42") || !snap.BracketedPaste {
		t.Errorf("snapshot: %dx%d bracketed %v lines %q", snap.Rows, snap.Cols, snap.BracketedPaste, snap.Lines)
	}
	tc12[any](e, "alice", "term_resize", map[string]any{"id": id, "rows": 30, "cols": 100})
	tc12[uint32](e, "alice", "term_send_keys", map[string]any{"id": id, "keys": []map[string]string{{"text": "stty size"}, {"name": "Enter"}}})
	wait(map[string]any{"kind": "output-matches", "cursor": w.Cursor, "regex": `30 100`})
	if snap, _ = tc12[terminal.Snapshot](e, "alice", "term_snapshot", map[string]any{"id": id}); snap.Rows != 30 || snap.Cols != 100 {
		t.Errorf("after resize: %dx%d", snap.Rows, snap.Cols)
	}

	info, _ := tc12[terminal.Info](e, "alice", "status12", map[string]any{"id": id})
	if info.Terminal == nil || *info.Terminal != (terminal.TerminalInfo{Rows: 30, Cols: 100, Term: "xterm-256color"}) ||
		info.ReapInMS == nil || info.ReapRule == nil || info.Phase != process.PhaseRunning {
		t.Errorf("status@1.2.0: %+v terminal %+v", info, info.Terminal)
	}
	// The same process through 1.1.0: the same fields, none of 1.2.0's.
	if !skipMixedVersions(t, "testcap12") {
		var raw resp[map[string]any]
		e.call("alice", "testcap12", "status", map[string]any{"id": id}, &raw)
		if raw.Error != nil || raw.OK["id"] != id || raw.OK["terminal"] != nil {
			t.Errorf("status@1.1.0 of a terminal process: %+v", raw)
		}
	}

	// Refusals, each a typed error-code naming what was wrong.
	if pe := tcErr(e, "alice", "testcap12", "term_send_keys", map[string]any{"id": id,
		"keys": []map[string]string{{"name": "Enter"}, {"name": "Entr"}}}, process.ErrInvalidInput); pe != nil && !strings.Contains(pe.Message, "Entr") {
		t.Errorf("unknown key: %q does not name it", pe.Message)
	}
	tcErr(e, "alice", "testcap12", "term_resize", map[string]any{"id": id, "rows": 0, "cols": 80}, process.ErrInvalidInput)
	tcErr(e, "alice", "testcap12", "term_resize", map[string]any{"id": id, "rows": 1001, "cols": 80}, process.ErrInvalidInput)
	if pe := tcErr(e, "alice", "testcap12", "wait_for", map[string]any{"id": id, "timeout_ms": 100,
		"condition": map[string]any{"kind": "output-matches", "regex": "a("}}, process.ErrInvalidInput); pe != nil && !strings.Contains(pe.Message, "a(") {
		t.Errorf("bad regex: %q does not name it", pe.Message)
	}
	tcErr(e, "bob", "testcap12", "term_snapshot", map[string]any{"id": id}, process.ErrNoSuchProcess)

	// A pipe process: terminal calls are refused, wait-for serves it.
	pipe, _ := tc12[string](e, "alice", "spawn_persistent", map[string]any{"request": sh("echo done")})
	tcErr(e, "alice", "testcap12", "term_snapshot", map[string]any{"id": pipe}, process.ErrInvalidInput)
	r, _ := tc12[terminal.WaitResult](e, "alice", "wait_for", map[string]any{"id": pipe, "timeout_ms": 20000,
		"condition": map[string]any{"kind": "exited"}})
	if r.Fired != terminal.Exited {
		t.Errorf("wait-for exited on a pipe process: %+v", r)
	}
	tc12[any](e, "alice", "release", map[string]any{"id": pipe})

	// C-c reaches the foreground job through the PTY's line discipline;
	// bash is back at its prompt, then exits.
	tc12[uint32](e, "alice", "term_submit", map[string]any{"id": id, "text": "echo started-$((2*3)); sleep 100"})
	w = wait(map[string]any{"kind": "output-matches", "cursor": w.Cursor, "regex": `started-6`})
	// A C-c that lands while bash is still handing the terminal to sleep
	// reaches bash, not sleep; a person presses it again, and so does this.
	for try := 0; ; try++ {
		tc12[uint32](e, "alice", "term_send_keys", map[string]any{"id": id, "keys": []map[string]string{{"name": "C-c"}}})
		var r resp[terminal.WaitResult]
		e.call("alice", "testcap12", "wait_for", map[string]any{"id": id, "timeout_ms": 3000,
			"condition": map[string]any{"kind": "output-matches", "cursor": w.Cursor, "regex": `\$ $`}}, &r)
		if r.Error == nil {
			break
		}
		if r.Error.Code != process.ErrWaitTimeout || try == 5 {
			t.Fatalf("no prompt after C-c: %v", r.Error)
		}
	}
	wait(map[string]any{"kind": "input-wait"})
	tc12[uint32](e, "alice", "term_submit", map[string]any{"id": id, "text": "exit 3"})
	if r = wait(map[string]any{"kind": "exited"}); r.Fired != terminal.Exited {
		t.Errorf("wait-for exited: %+v", r)
	}
	if info, _ = tc12[terminal.Info](e, "alice", "status12", map[string]any{"id": id}); info.Phase != process.PhaseExited || info.ReapInMS != nil {
		t.Errorf("status@1.2.0 after exit: %+v", info)
	}
}

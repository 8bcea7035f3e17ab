package e2e

import (
	"strings"
	"testing"
	"time"
)

type shExit struct {
	ExitCode *int32 `json:"exit_code"`
	Signal   *int32 `json:"signal"`
	Reason   string `json:"reason"`
}

type shRun struct {
	ID           string  `json:"id"`
	Running      bool    `json:"running"`
	Exit         *shExit `json:"exit"`
	Stdout       *string `json:"stdout"`
	Stderr       *string `json:"stderr"`
	Cursor       string  `json:"cursor"`
	BytesDropped uint64  `json:"bytes_dropped"`
	TimedOut     bool    `json:"timed_out"`
	Truncated    bool    `json:"truncated"`
	EOF          bool    `json:"eof"`
	Written      int     `json:"written"`
	Label        string  `json:"label"`
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func TestShellRunFinishes(t *testing.T) {
	e := newEnv(t, "shell")
	var r shRun
	e.call("alice", "shell", "run_shell_command", map[string]any{"command": "echo hi; echo oops >&2; exit 2"}, &r)
	if r.Running || r.Exit == nil || r.Exit.ExitCode == nil || *r.Exit.ExitCode != 2 || str(r.Stdout) != "hi\n" || str(r.Stderr) != "oops\n" {
		t.Errorf("run = %+v stdout %q stderr %q", r, str(r.Stdout), str(r.Stderr))
	}
	if r.ID != "" {
		t.Errorf("a finished, fully returned run keeps id %q", r.ID)
	}
	// It was released: nothing is listed.
	var l struct {
		Processes []map[string]any `json:"processes"`
	}
	e.call("alice", "shell", "list_processes", `{}`, &l)
	if len(l.Processes) != 0 {
		t.Errorf("processes after a finished run: %v", l.Processes)
	}
	// timeout_ms bounds the run.
	e.call("alice", "shell", "run_shell_command", map[string]any{"command": "sleep 10", "timeout_ms": 300, "yield_ms": 5000}, &r)
	if !r.TimedOut || r.Exit == nil || r.Exit.Signal == nil || r.Exit.Reason != "lifetime" {
		t.Errorf("timed-out run = %+v exit %+v", r, r.Exit)
	}
	// UTF-8 output survives.
	e.call("alice", "shell", "run_shell_command", map[string]any{"command": "printf 'h\\303\\251llo \\360\\237\\230\\200'"}, &r)
	if str(r.Stdout) != "héllo 😀" {
		t.Errorf("utf-8 = %q", str(r.Stdout))
	}
}

// The motivating story: a command that outlives yield_ms moves to the
// background; later calls on other instances read it with the cursor,
// write its stdin, and kill it.
func TestShellBackgroundAcrossInstances(t *testing.T) {
	e := newEnv(t, "shell")
	var r shRun
	i1 := e.call("alice", "shell", "run_shell_command",
		map[string]any{"command": "echo start; sleep 0.5; echo done", "yield_ms": 200}, &r)
	if !r.Running || r.ID == "" || r.Cursor == "" || r.Exit != nil {
		t.Fatalf("slow run did not move to the background: %+v", r)
	}
	first := str(r.Stdout)
	// Follow from the cursor until the end.
	cur, all := r.Cursor, first
	var i2 uint64
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var lo shRun
		inst := e.call("alice", "shell", "read_process_logs", map[string]any{"id": r.ID, "cursor": cur}, &lo)
		if inst != i1 {
			i2 = inst
		}
		all += str(lo.Stdout)
		cur = lo.Cursor
		if lo.EOF && !lo.Running {
			if lo.Exit == nil || lo.Exit.ExitCode == nil || *lo.Exit.ExitCode != 0 {
				t.Errorf("exit = %+v", lo.Exit)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if all != "start\ndone\n" {
		t.Errorf("output followed by cursor = %q", all)
	}

	// An interactive one: keep stdin open, write from another call.
	var sp shRun
	e.call("alice", "shell", "spawn_background_process",
		map[string]any{"command": "while read l; do echo \"<$l>\"; done", "label": "reader", "keep_stdin_open": true}, &sp)
	if sp.ID == "" || sp.Label != "reader" {
		t.Fatalf("spawn_background_process = %+v", sp)
	}
	var w shRun
	i3 := e.call("alice", "shell", "write_process_stdin", map[string]any{"id": sp.ID, "data": "a\nb\n"}, &w)
	if w.Written != 4 {
		t.Errorf("written %d", w.Written)
	}
	t.Logf("instances: run %d, read %d, write %d", i1, i2, i3)
	if i2 == 0 {
		t.Errorf("no read ran on an instance other than the run's (%d)", i1)
	}
	var lo shRun
	for time.Now().Before(deadline) {
		e.call("alice", "shell", "read_process_logs", map[string]any{"id": sp.ID, "stream": "stdout"}, &lo)
		if str(lo.Stdout) == "<a>\n<b>\n" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if str(lo.Stdout) != "<a>\n<b>\n" || lo.Stderr != nil || !lo.Running {
		t.Errorf("reader output %q (stderr %v, running %v)", str(lo.Stdout), lo.Stderr, lo.Running)
	}
	var l struct {
		Processes []map[string]any `json:"processes"`
	}
	e.call("alice", "shell", "list_processes", map[string]any{"label": "read"}, &l)
	if len(l.Processes) != 1 || l.Processes[0]["id"] != sp.ID {
		t.Errorf("list_processes(read) = %v", l.Processes)
	}

	// Another principal: no such process, on every tool.
	for tool, in := range map[string]any{
		"read_process_logs":   map[string]any{"id": sp.ID},
		"write_process_stdin": map[string]any{"id": sp.ID, "data": "x"},
		"kill_process":        map[string]any{"id": sp.ID},
	} {
		e.toolErr("bob", "shell", tool, in, "no-such-process")
	}

	var k shRun
	e.call("alice", "shell", "kill_process", map[string]any{"id": sp.ID, "grace_ms": 500}, &k)
	if k.Running || k.Exit == nil || k.Exit.Reason != "stopped" {
		t.Errorf("kill_process = %+v exit %+v", k, k.Exit)
	}
}

func TestShellInvalidInput(t *testing.T) {
	e := newEnv(t, "shell")
	// What the tools' declared schemas forbid, the host refuses before
	// the guest runs (naming the path and the rule); the tools' own
	// checks of the same inputs are unit-tested in capsules/sdk.
	for _, tt := range []struct{ tool, input, path, rule string }{
		{"run_shell_command", `{}`, "", "required"},
		{"run_shell_command", `{"command":"true","yield_ms":60000}`, "/yield_ms", "maximum"},
		{"run_shell_command", `{"command":"true","timeout_ms":0}`, "/timeout_ms", "minimum"},
		{"run_shell_command", `{"command":"true","shell":"bash"}`, "", "additionalProperties"},
		{"run_shell_command", `{"command":true}`, "/command", "type"},
		{"run_shell_command", `not json`, "", "json"},
		{"read_process_logs", `{}`, "", "required"},
		{"read_process_logs", `{"id":"x","stream":"both2"}`, "/stream", "enum"},
		{"read_process_logs", `{"id":"x","max_bytes":0}`, "/max_bytes", "minimum"},
		{"write_process_stdin", `{"data":"x"}`, "", "required"},
	} {
		e.inputErr("alice", "shell", tt.tool, tt.input, tt.path, tt.rule)
	}
	// What only the tool can judge is still its own error.
	tests := []struct {
		tool, input, want string
	}{
		{"run_shell_command", `{"command":"  "}`, `"command" is required`},
		{"read_process_logs", `{"id":"x","cursor":"garbage!"}`, `cursor is not one this tool returned`},
		{"read_process_logs", `{"id":"nope"}`, `no-such-process`},
		{"kill_process", `{"id":""}`, `"id" is required`},
		{"spawn_background_process", `{"command":"true","label":"bad\u0001label"}`, `invalid-input`},
	}
	for _, tt := range tests {
		e.toolErr("alice", "shell", tt.tool, tt.input, tt.want)
	}
	// Writing to a process whose stdin is closed.
	var sp shRun
	e.call("alice", "shell", "spawn_background_process", map[string]any{"command": "sleep 5"}, &sp)
	e.toolErr("alice", "shell", "write_process_stdin", map[string]any{"id": sp.ID, "data": "x"}, "write_process_stdin:")
	e.call("alice", "shell", "kill_process", map[string]any{"id": sp.ID, "grace_ms": 0}, nil)
	if strings.Contains(sp.ID, " ") {
		t.Fatal("unreachable")
	}
}

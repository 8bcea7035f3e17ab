package e2e

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/registry"
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

// One cursor format: a one-stream cursor of read_process_logs is the
// host's read-since token, the one the HTTP API's logs return as "next"
// (the operator read here): each side continues from the other's.
// Reads of two bytes never cut a UTF-8 character, and skip or repeat
// nothing.
func TestShellCursorIsTheAPIs(t *testing.T) {
	e := newEnv(t, "shell")
	const text = "h\u00e9llo \U0001F600 end"
	var sp shRun
	e.call("alice", "shell", "spawn_background_process", map[string]any{"command": `printf 'h\303\251llo \360\237\230\200 end'`}, &sp)
	var got strings.Builder
	cur := ""
	for end := time.Now().Add(20 * time.Second); got.String() != text; {
		if time.Now().After(end) {
			t.Fatalf("read %q of %q", got.String(), text)
		}
		var lo shRun
		e.call("alice", "shell", "read_process_logs", map[string]any{"id": sp.ID, "stream": "stdout", "max_bytes": 2, "cursor": cur}, &lo)
		if s := str(lo.Stdout); !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
			t.Fatalf("a 2-byte read returned %q", s)
		}
		got.WriteString(str(lo.Stdout))
		cur = lo.Cursor
		if got.String() == "h\u00e9" {
			// Hand this cursor to the API's read: it goes on from there.
			ch, err := e.reg.OperatorReadSince(sp.ID, registry.Stdout, &cur, 1<<20)
			if err != nil || string(ch.Data) != strings.TrimPrefix(text, "h\u00e9") {
				t.Fatalf("the API read from the shell's cursor %q: %q %v", cur, ch.Data, err)
			}
		}
	}
	// And the other way: the API's cursor after "h\u00e9llo " in the shell.
	six := "h\u00e9llo "
	ch, err := e.reg.OperatorReadSince(sp.ID, registry.Stdout, nil, uint32(len(six)))
	if err != nil || string(ch.Data) != six {
		t.Fatalf("API read: %q %v", ch.Data, err)
	}
	var lo shRun
	e.call("alice", "shell", "read_process_logs", map[string]any{"id": sp.ID, "stream": "stdout", "cursor": ch.Next}, &lo)
	if str(lo.Stdout) != strings.TrimPrefix(text, six) {
		t.Errorf("the shell from the API's cursor: %q", str(lo.Stdout))
	}
	// Both streams: OUT.ERR, each half a stream's cursor.
	e.call("alice", "shell", "read_process_logs", map[string]any{"id": sp.ID}, &lo)
	if o, _, ok := strings.Cut(lo.Cursor, "."); !ok || len(o) != len(ch.Next) {
		t.Errorf("a two-stream cursor %q", lo.Cursor)
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
		{"read_process_logs", `{"id":"x","cursor":"garbage!"}`, `cursor is not one this tool or the logs API returned`},
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

package e2e

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/host"
)

// resp is a testcap answer: {"ok": T} or {"error": error-code}.
type resp[T any] struct {
	OK    T              `json:"ok"`
	Error *process.Error `json:"error"`
}

// tc calls a testcap tool and returns its ok value, failing the test if
// the contract call failed.
func tc[T any](e *env, principal, tool string, in any) (T, uint64) {
	e.t.Helper()
	var r resp[T]
	inst := e.call(principal, "testcap", tool, in, &r)
	if r.Error != nil {
		e.t.Fatalf("testcap.%s(%s): %v", tool, mustJSON(e.t, in), r.Error)
	}
	return r.OK, inst
}

// tcErr calls a testcap tool that must fail with code.
func tcErr(e *env, principal, capsule, tool string, in any, code process.Code) *process.Error {
	e.t.Helper()
	var r resp[any]
	e.call(principal, capsule, tool, in, &r)
	if r.Error == nil || r.Error.Code != code {
		e.t.Errorf("%s.%s(%s) = %+v, %v; want error %s", capsule, tool, mustJSON(e.t, in), r.OK, r.Error, code)
	}
	return r.Error
}

type opsOut struct {
	Handle  uint32           `json:"handle"`
	Results []map[string]any `json:"results"`
}

func sh(script string) map[string]any {
	return map[string]any{"cmd": "/bin/sh", "args": []string{"-c", script}}
}

func code(e process.ExitInfo) int32 {
	if e.ExitCode == nil {
		return -1000
	}
	return *e.ExitCode
}

func TestTestcapDescribe(t *testing.T) {
	e := newEnv(t, "testcap", "testcap10")
	c, _ := e.h.Capsule("testcap")
	var names []string
	for _, tl := range c.Tools() {
		names = append(names, tl.Name)
		if tl.InputSchema == "" || tl.Description == "" {
			t.Errorf("tool %s lacks a schema or description", tl.Name)
		}
	}
	for _, want := range []string{"spawn", "spawn_background_ops", "spawn_persistent", "attach_ops", "list_processes",
		"status", "status_many", "read_since", "read_logs", "write_stdin", "close_stdin", "signal", "wait", "stop",
		"release", "poll_events", "v1_spawn", "v1_spawn_background_ops", "echo", "fail", "panic"} {
		if strings.HasPrefix(want, "v1_") && skipMixedVersions(t, "testcap") {
			continue
		}
		if !slices.Contains(names, want) {
			t.Errorf("testcap lacks tool %s (has %v)", want, names)
		}
	}
}

func TestSDKErrorPaths(t *testing.T) {
	e := newEnv(t, "testcap")
	var echoed map[string]any
	e.call("alice", "testcap", "echo", `{"a":[1,"é"]}`, &echoed)
	if mustJSON(t, echoed) != `{"a":[1,"é"]}` {
		t.Errorf("echo = %v", echoed)
	}
	e.toolErr("alice", "testcap", "fail", map[string]any{"message": "nope"}, "nope")
	e.toolErr("alice", "testcap", "panic", `{}`, "internal error (panic: testcap: deliberate panic)")
	// Input the tool's schema refuses never reaches the SDK's own checks
	// (unit-tested in capsules/sdk): the host refuses it first.
	e.inputErr("alice", "testcap", "echo", `{"a":`, "", "json")
	e.inputErr("alice", "testcap", "spawn", `{"cmd":1}`, "/cmd", "type")
	e.inputErr("alice", "testcap", "status", `{"id":"x","bogus":true}`, "", "additionalProperties")
	// The instance survives all of that.
	e.call("alice", "testcap", "echo", `{}`, nil)
}

func TestSpawnBlocking(t *testing.T) {
	e := newEnv(t, "testcap")
	r, _ := tc[process.ProcessResult](e, "alice", "spawn", sh("echo out; echo err >&2; exit 3"))
	if string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || code(r.Exit) != 3 || r.Truncated {
		t.Errorf("spawn = %q %q %+v", r.Stdout, r.Stderr, r.Exit)
	}
	// stdin prelude, env, and the timeout killing the tree.
	r, _ = tc[process.ProcessResult](e, "alice", "spawn", map[string]any{"cmd": "/bin/cat", "stdin": []byte("from stdin")})
	if string(r.Stdout) != "from stdin" {
		t.Errorf("cat stdin = %q", r.Stdout)
	}
	in := sh(`printf %s "$FOO"`)
	in["env"] = []map[string]string{{"key": "FOO", "value": "bar baz"}}
	if r, _ = tc[process.ProcessResult](e, "alice", "spawn", in); string(r.Stdout) != "bar baz" {
		t.Errorf("env = %q", r.Stdout)
	}
	in = sh("sleep 10")
	in["timeout_ms"] = 300
	start := time.Now()
	if r, _ = tc[process.ProcessResult](e, "alice", "spawn", in); r.Exit.Signal == nil || *r.Exit.Signal != 9 {
		t.Errorf("timeout exit = %+v", r.Exit)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("timeout took %v", d)
	}
	// Contract errors come back as error-codes.
	tcErr(e, "alice", "testcap", "spawn", map[string]any{"cmd": "/usr/bin/env"}, process.ErrCapabilityDenied)
	in = sh("true")
	in["cwd"] = "../outside"
	tcErr(e, "alice", "testcap", "spawn", in, process.ErrBoundaryEscape)
	in = sh("true")
	in["env"] = []map[string]string{{"key": "LD_PRELOAD", "value": "x"}}
	tcErr(e, "alice", "testcap", "spawn", in, process.ErrInvalidInput)
}

func TestHandleOps(t *testing.T) {
	for _, tool := range []string{"spawn_background_ops", "v1_spawn_background_ops"} {
		t.Run(tool, func(t *testing.T) {
			if strings.HasPrefix(tool, "v1_") && skipMixedVersions(t, "testcap") {
				t.SkipNow()
			}
			e := newEnv(t, "testcap")
			out, _ := tc[opsOut](e, "alice", tool, map[string]any{
				// A background process's stdin stays open after the
				// prelude, for the handle's write-stdin and close-stdin.
				"request": map[string]any{"cmd": "/bin/cat", "stdin": []byte("abc")},
				"ops": []map[string]any{
					{"op": "os_pid"},
					{"op": "write_stdin", "data": "more"},
					{"op": "close_stdin"},
					{"op": "close_stdin"}, // idempotent
					{"op": "wait_with_output", "timeout_ms": 5000},
					{"op": "read_logs"},
					{"op": "wait", "timeout_ms": 1000},
				},
			})
			if out.Handle == 0 {
				t.Error("handle index 0 (never a valid handle)")
			}
			if len(out.Results) != 7 {
				t.Fatalf("results %v", out.Results)
			}
			for i, r := range out.Results {
				if r["error"] != nil {
					t.Errorf("op %d: %v", i, r["error"])
				}
			}
			if pid, _ := out.Results[0]["ok"].(float64); pid <= 1 {
				t.Errorf("os_pid = %v", out.Results[0])
			}
			if n, _ := out.Results[1]["ok"].(float64); n != 4 {
				t.Errorf("write_stdin on a background handle = %v", out.Results[1])
			}
			wo, _ := out.Results[4]["ok"].(map[string]any)
			if wo["stdout"] != "YWJjbW9yZQ==" { // base64("abcmore")
				t.Errorf("wait_with_output = %v", wo)
			}

			// kill and signal on a sleeper; the handle is dropped (reaped).
			out, _ = tc[opsOut](e, "alice", tool, map[string]any{
				"request": sh("sleep 30"),
				"ops": []map[string]any{
					{"op": "signal", "sig": "usr1"},
					{"op": "wait", "timeout_ms": 2000},
				},
			})
			if ex, _ := out.Results[1]["ok"].(map[string]any); ex["signal"] != float64(10) {
				t.Errorf("usr1 exit = %v", out.Results[1])
			}
			out, _ = tc[opsOut](e, "alice", tool, map[string]any{
				"request": sh("sleep 30"),
				"ops":     []map[string]any{{"op": "kill"}, {"op": "wait", "timeout_ms": 100}, {"op": "drop"}},
			})
			if ex, _ := out.Results[0]["ok"].(map[string]any); ex["signal"] != float64(9) {
				t.Errorf("kill exit = %v", out.Results[0])
			}
			// A wait that times out.
			out, _ = tc[opsOut](e, "alice", tool, map[string]any{
				"request": sh("sleep 30"),
				"ops":     []map[string]any{{"op": "wait", "timeout_ms": 50}},
			})
			if errCode(out.Results[0]) != "wait-timeout" {
				t.Errorf("short wait = %v", out.Results[0])
			}
		})
	}
}

// The persistent story across pooled instances: spawn on one, read with a
// cursor on another, write stdin on a third, stop, release.
func TestPersistentAcrossInstances(t *testing.T) {
	e := newEnv(t, "testcap")
	id, i1 := tc[string](e, "alice", "spawn_persistent", map[string]any{
		"request": sh(`echo ready; while read l; do echo "got:$l"; done; echo bye >&2`),
		"options": map[string]any{"label": "echoer", "keep_stdin_open": true},
	})
	if len(id) != 52 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		t.Fatalf("id %q is not 52 base32 characters", id)
	}
	var chunk process.LogChunk
	var i2 uint64
	deadline := time.Now().Add(5 * time.Second)
	// read_since does not drain, so it can be repeated until the output
	// is there and the call has landed on an instance other than the
	// spawner's (pool placement is the pool's business, not ours).
	for (string(chunk.Data) != "ready\n" || i2 == i1) && time.Now().Before(deadline) {
		chunk, i2 = tc[process.LogChunk](e, "alice", "read_since", map[string]any{"id": id, "stream": "stdout", "max": 1024})
		time.Sleep(20 * time.Millisecond)
	}
	if string(chunk.Data) != "ready\n" || chunk.EOF {
		t.Fatalf("read_since = %+v", chunk)
	}
	n, i3 := tc[uint32](e, "alice", "write_stdin", map[string]any{"id": id, "data": "one\ntwo\n"})
	if n != 8 {
		t.Errorf("write_stdin = %d", n)
	}
	if i1 == i2 {
		t.Errorf("never read from an instance other than the spawner's (%d)", i1)
	}
	t.Logf("instances: spawn %d, read %d, write %d", i1, i2, i3)

	// Continue from the cursor: only the new output.
	var next process.LogChunk
	for !strings.Contains(string(next.Data), "got:two") && time.Now().Before(deadline) {
		next, _ = tc[process.LogChunk](e, "alice", "read_since", map[string]any{"id": id, "stream": "stdout", "cursor": chunk.Next, "max": 1024})
		time.Sleep(20 * time.Millisecond)
	}
	if string(next.Data) != "got:one\ngot:two\n" {
		t.Errorf("read from cursor = %q", next.Data)
	}

	// Status, status-many, list with a label filter.
	info, _ := tc[process.ProcessInfo](e, "alice", "status", map[string]any{"id": id})
	if info.ID != id || info.Label != "echoer" || info.Phase != process.PhaseRunning || !info.StdinOpen || info.OSPid == nil {
		t.Errorf("status = %+v", info)
	}
	many, _ := tc[[]process.ProcessInfo](e, "alice", "status_many", map[string]any{"ids": []string{id, strings.Repeat("a", 52)}})
	if len(many) != 1 || many[0].ID != id {
		t.Errorf("status_many = %+v", many)
	}
	list, _ := tc[[]process.ProcessInfo](e, "alice", "list_processes", map[string]any{"label": "echo"})
	if len(list) != 1 {
		t.Errorf("list_processes(echo) = %+v", list)
	}
	if list, _ = tc[[]process.ProcessInfo](e, "alice", "list_processes", map[string]any{"label": "nomatch"}); len(list) != 0 {
		t.Errorf("list_processes(nomatch) = %+v", list)
	}

	// Another principal sees nothing, for every function.
	tcErr(e, "bob", "testcap", "status", map[string]any{"id": id}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "read_since", map[string]any{"id": id, "stream": "stdout", "max": 10}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "read_logs", map[string]any{"id": id}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "write_stdin", map[string]any{"id": id, "data": "x"}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "close_stdin", map[string]any{"id": id}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "signal", map[string]any{"id": id, "sig": "term"}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "wait", map[string]any{"id": id, "timeout_ms": 10}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "stop", map[string]any{"id": id}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "release", map[string]any{"id": id}, process.ErrNoSuchProcess)
	tcErr(e, "bob", "testcap", "attach_ops", map[string]any{"id": id, "ops": []any{}}, process.ErrNoSuchProcess)
	if list, _ := tc[[]process.ProcessInfo](e, "bob", "list_processes", map[string]any{}); len(list) != 0 {
		t.Errorf("bob lists %+v", list)
	}

	// Attach: read (draining), write, a bounded wait, then drop = detach.
	att, _ := tc[opsOut](e, "alice", "attach_ops", map[string]any{"id": id, "ops": []map[string]any{
		{"op": "write_stdin", "data": "three\n"},
		{"op": "wait", "timeout_ms": 100},
		{"op": "wait"}, // unbounded on an attached handle: invalid-input
		{"op": "os_pid"},
		{"op": "read_logs"},
		{"op": "drop"},
	}})
	if n, _ := att.Results[0]["ok"].(float64); n != 6 {
		t.Errorf("attached write_stdin = %v", att.Results[0])
	}
	if errCode(att.Results[1]) != "wait-timeout" {
		t.Errorf("attached bounded wait = %v", att.Results[1])
	}
	if errCode(att.Results[2]) != "invalid-input" {
		t.Errorf("attached unbounded wait = %v", att.Results[2])
	}
	if info, _ = tc[process.ProcessInfo](e, "alice", "status", map[string]any{"id": id}); info.Phase != process.PhaseRunning {
		t.Errorf("dropping an attached handle changed the process: %+v", info)
	}
	// release refuses a running process.
	tcErr(e, "alice", "testcap", "release", map[string]any{"id": id}, process.ErrInvalidInput)

	// close stdin: the loop ends, the shell prints bye to stderr and exits.
	tc[any](e, "alice", "close_stdin", map[string]any{"id": id})
	ex, _ := tc[process.ExitInfo](e, "alice", "wait", map[string]any{"id": id, "timeout_ms": 5000})
	if code(ex) != 0 {
		t.Errorf("exit after close_stdin = %+v", ex)
	}
	errChunk, _ := tc[process.LogChunk](e, "alice", "read_since", map[string]any{"id": id, "stream": "stderr", "max": 100})
	if string(errChunk.Data) != "bye\n" || !errChunk.EOF {
		t.Errorf("stderr = %+v", errChunk)
	}
	logs, _ := tc[process.ReadLogsResult](e, "alice", "read_logs", map[string]any{"id": id})
	if logs.Running || logs.Exit == nil {
		t.Errorf("read_logs after exit = %+v", logs)
	}
	// stop of an exited process returns its exit; release forgets it.
	if ex, _ = tc[process.ExitInfo](e, "alice", "stop", map[string]any{"id": id, "grace_ms": 100}); code(ex) != 0 {
		t.Errorf("stop after exit = %+v", ex)
	}
	tc[any](e, "alice", "release", map[string]any{"id": id})
	tc[any](e, "alice", "release", map[string]any{"id": id}) // idempotent for the owner
	tcErr(e, "alice", "testcap", "status", map[string]any{"id": id}, process.ErrNoSuchProcess)
}

func TestStopSignalEvents(t *testing.T) {
	e := newEnv(t, "testcap")
	id, _ := tc[string](e, "alice", "spawn_persistent", map[string]any{"request": sh("sleep 30")})
	tc[any](e, "alice", "signal", map[string]any{"id": id, "sig": "stop"})
	tc[any](e, "alice", "signal", map[string]any{"id": id, "sig": "cont"})
	ex, _ := tc[process.ExitInfo](e, "alice", "stop", map[string]any{"id": id, "grace_ms": 1000})
	if ex.Signal == nil || *ex.Signal != 15 {
		t.Errorf("stop exit = %+v", ex)
	}
	info, _ := tc[process.ProcessInfo](e, "alice", "status", map[string]any{"id": id})
	if info.Phase != process.PhaseExited || info.ExitReason == nil || *info.ExitReason != process.ReasonStopped {
		t.Errorf("status after stop = %+v", info)
	}
	// The exit shows up in poll_events.
	var seen bool
	var cursor uint64
	for range 5 {
		b, _ := tc[process.EventBatch](e, "alice", "poll_events", map[string]any{"cursor": cursor, "max": 100, "timeout_ms": 200})
		for _, ev := range b.Events {
			if ev.ID == id && ev.Kind == process.EventExited && ev.Exit != nil && ev.Exit.Reason == process.ReasonStopped {
				seen = true
			}
		}
		cursor = b.Next
		if seen {
			break
		}
	}
	if !seen {
		t.Error("no exited event for the stopped process")
	}
	// Bob's event stream is empty.
	if b, _ := tc[process.EventBatch](e, "bob", "poll_events", map[string]any{"cursor": 0, "max": 100, "timeout_ms": 0}); len(b.Events) != 0 {
		t.Errorf("bob sees events %+v", b.Events)
	}
}

func TestSpawnPersistentOptions(t *testing.T) {
	e := newEnv(t, "testcap")
	tcErr(e, "alice", "testcap", "spawn_persistent",
		map[string]any{"request": sh("true"), "options": map[string]any{"idle_timeout_ms": 0}}, process.ErrInvalidInput)
	id, _ := tc[string](e, "alice", "spawn_persistent", map[string]any{"request": sh("sleep 30"),
		"options": map[string]any{"max_lifetime_ms": 300, "overflow": "backpressure", "log_ring_bytes": 8192,
			"limits": map[string]any{"max_open_files": 64}}})
	ex, _ := tc[process.ExitInfo](e, "alice", "wait", map[string]any{"id": id, "timeout_ms": 10000})
	if ex.Signal == nil {
		t.Errorf("lifetime exit = %+v", ex)
	}
	info, _ := tc[process.ProcessInfo](e, "alice", "status", map[string]any{"id": id})
	if info.ExitReason == nil || *info.ExitReason != process.ReasonLifetime {
		t.Errorf("reason = %+v", info.ExitReason)
	}
	// The owner-fallback principal (no principal) cannot persist.
	var r resp[string]
	res, err := e.h.Call(t.Context(), "testcap", "spawn_persistent", mustJSON(t, map[string]any{"request": sh("true")}))
	if err != nil {
		t.Fatal(err)
	}
	if err := jsonUnmarshal(res.Output, &r); err != nil || r.Error == nil || r.Error.Code != process.ErrPersistUnsupported {
		t.Errorf("fallback spawn_persistent = %s", res.Output)
	}
}

// The 1.0.0-only capsule: blocking spawn and its error-codes.
func TestV1Only(t *testing.T) {
	e := newEnv(t, "testcap", "testcap10")
	for _, c := range []string{"testcap", "testcap10"} {
		if skipMixedVersions(t, c) {
			continue
		}
		var r resp[process.ProcessResult]
		e.call("alice", c, "v1_spawn", sh("echo v1; exit 4"), &r)
		if r.Error != nil || string(r.OK.Stdout) != "v1\n" || code(r.OK.Exit) != 4 {
			t.Errorf("%s v1_spawn = %+v %v", c, r.OK, r.Error)
		}
		tcErr(e, "alice", c, "v1_spawn", map[string]any{"cmd": "/usr/bin/env"}, process.ErrCapabilityDenied)
	}
	// testcap10 has no 1.1.0 tools at all.
	if _, err := e.try("alice", "testcap10", "spawn_persistent", `{}`); !errors.Is(err, host.ErrUnknownTool) {
		t.Errorf("testcap10 spawn_persistent: %v", err)
	}
}

// errCode is the error-code case of one op result ("" if it succeeded).
func errCode(r map[string]any) string {
	e, _ := r["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// Every bundled capsule's tools declare input schemas the host compiles
// (a schema that does not compile would refuse the load), and the host
// validates against them: an input the schema refuses never reaches the
// guest.
func TestBundledSchemasCompileAndValidate(t *testing.T) {
	e := newEnv(t, "shell", "testcap", "testcap10")
	for _, name := range []string{"shell", "testcap", "testcap10"} {
		c, _ := e.h.Capsule(name)
		for _, tl := range c.Tools() {
			if tl.InputSchema == "" {
				t.Errorf("%s.%s declares no input schema", name, tl.Name)
			}
		}
	}
	// run_shell_command requires "command" and allows no other property.
	for _, in := range []any{map[string]any{}, map[string]any{"command": "true", "nope": 1}, map[string]any{"command": 7}} {
		_, err := e.try("alice", "shell", "run_shell_command", in)
		var ie *host.InvalidInputError
		if !errors.As(err, &ie) || ie.Tool != "run_shell_command" {
			t.Errorf("run_shell_command(%s): %v; want the host's invalid input", mustJSON(t, in), err)
		}
	}
}

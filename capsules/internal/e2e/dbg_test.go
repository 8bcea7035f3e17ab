package e2e

import "testing"

func TestDbg(t *testing.T) {
	e := newEnv(t, "testcap")
	var out any
	for _, ops := range [][]map[string]any{
		{{"op": "close_stdin"}, {"op": "close_stdin"}, {"op": "wait", "timeout_ms": 3000}},
		{{"op": "os_pid"}, {"op": "write_stdin", "data": "more"}, {"op": "close_stdin"}, {"op": "wait_with_output", "timeout_ms": 5000}},
		{{"op": "os_pid"}, {"op": "write_stdin", "data": "more"}, {"op": "close_stdin"}, {"op": "close_stdin"}, {"op": "wait_with_output", "timeout_ms": 5000}},
	} {
		e.call("alice", "testcap", "spawn_background_ops", map[string]any{"request": map[string]any{"cmd": "/bin/cat", "stdin": []byte("abc")}, "ops": ops}, &out)
		t.Logf("%v", out)
	}
}

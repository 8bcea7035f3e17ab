package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/capsule-host/capsule-host/host"
)

// everythingServer is the entry point of @modelcontextprotocol/server-
// everything, pinned in cmd/capsule-host/testdata/mcp-client (make
// npm-deps installs it).
func everythingServer(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIP: node is not installed: run `make npm-deps`")
	}
	script = filepath.Join(capsulesDir(t), "..", "cmd", "capsule-host", "testdata", "mcp-client",
		"node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(script); err != nil {
		t.Skipf("SKIP: @modelcontextprotocol/server-everything is not installed (%v): run `make npm-deps`", err)
	}
	// The capsule's bwrap sandbox mounts a private tmpfs on /tmp, so a
	// checkout under /tmp is not there for the server to be read from.
	if strings.HasPrefix(script, "/tmp/") {
		t.Skipf("SKIP: the checkout is under /tmp (%s), which the bwrap sandbox replaces with its own tmpfs: clone elsewhere to run this test", script)
	}
	return node, script
}

// typedCode is the code of a tool's typed error ({"code","message"}, the
// guest contract's convention), "" for a plain-text one.
func typedCode(err error) string {
	var te *host.ToolError
	if !errors.As(err, &te) {
		return ""
	}
	var v struct{ Code string }
	if json.Unmarshal([]byte(te.Message), &v) != nil {
		return ""
	}
	return v.Code
}

// The mcp-stdio capsule drives a real third-party MCP stdio server: the
// handshake's notifications and the server's stderr are kept, its tools
// are listed and called from at least three pooled instances (calls in
// flight at once, each matching its own response by ID), another
// principal learns nothing, and bad requests get typed errors.
func TestMCPStdioEverythingServer(t *testing.T) {
	_, script := everythingServer(t)
	e := newEnv(t, "mcp-stdio")
	const cap = "mcp-stdio"

	var st struct {
		ID              string                `json:"id"`
		ProtocolVersion string                `json:"protocol_version"`
		ServerInfo      struct{ Name string } `json:"server_info"`
		Notifications   []json.RawMessage     `json:"notifications"`
		Cursor          string                `json:"cursor"`
	}
	e.call("alice", cap, "start_server", map[string]any{"command": "node", "args": []string{script, "stdio"}}, &st)
	t.Cleanup(func() { _, _ = e.try("alice", cap, "stop_server", map[string]any{"id": st.ID, "grace_ms": 0}) })
	if st.ID == "" || st.ProtocolVersion == "" || !strings.Contains(st.ServerInfo.Name, "everything") {
		t.Fatalf("start_server: %+v", st)
	}
	// server-everything announces tools/list_changed when it gets
	// notifications/initialized: the next exchange from start_server's
	// cursor brings it back (or start_server did, if it was quick).
	var lt struct {
		Notifications []json.RawMessage `json:"notifications"`
		Cursor        string            `json:"cursor"`
	}
	e.call("alice", cap, "list_tools", map[string]any{"id": st.ID, "cursor": st.Cursor}, &lt)
	if notes := fmt.Sprint(jsonStrings(st.Notifications), jsonStrings(lt.Notifications)); !strings.Contains(notes, "notifications/tools/list_changed") {
		t.Errorf("no tools/list_changed among the notifications: %s", notes)
	}
	if lt.Cursor == "" || lt.Cursor == st.Cursor {
		t.Errorf("list_tools did not move the cursor on: %q after %q", lt.Cursor, st.Cursor)
	}

	// The calls come from two principals, each on its own server: the
	// pool's fair share (max_per_principal, half of max by default)
	// holds one principal to 2 of the 4 instances, so a third instance
	// is only ever seen with a second caller (RFC §19).
	var carol struct {
		ID     string `json:"id"`
		Cursor string `json:"cursor"`
	}
	e.call("carol", cap, "start_server", map[string]any{"command": "node", "args": []string{script, "stdio"}}, &carol)
	t.Cleanup(func() { _, _ = e.try("carol", cap, "stop_server", map[string]any{"id": carol.ID, "grace_ms": 0}) })
	callers := [2]struct{ who, id, cursor string }{{"alice", st.ID, st.Cursor}, {"carol", carol.ID, carol.Cursor}}

	instances := map[uint64]bool{}
	var mu sync.Mutex
	for round := 0; round < 10 && len(instances) < 3; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := callers[g%2]
				inst, err := echoRound(e, c.who, c.id, c.cursor, fmt.Sprintf("r%d-g%d", round, g))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				instances[inst[0]], instances[inst[1]] = true, true
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	if len(instances) < 3 {
		t.Fatalf("the calls ran on %d pooled instances, want at least 3: %v", len(instances), instances)
	}

	var lg struct{ Text string }
	e.call("alice", cap, "server_log", map[string]any{"id": st.ID}, &lg)
	if !strings.Contains(lg.Text, "STDIO") {
		t.Errorf("server_log (stderr): %q", lg.Text)
	}

	// The server's own error for a tool it does not have comes back as
	// the server put it (isError) or as a typed server-error.
	r, err := e.try("alice", cap, "call_tool", map[string]any{"id": st.ID, "name": "no_such_tool"})
	if err == nil && !strings.Contains(r.Output, `"isError":true`) || err != nil && typedCode(err) != "server-error" {
		t.Errorf("an unknown server tool: %v %s", err, r.Output)
	}
	for _, who := range []string{"bob", "alice"} {
		id := st.ID
		if who == "alice" {
			id = "no-such-id"
		}
		if _, err := e.try(who, cap, "list_tools", map[string]any{"id": id}); typedCode(err) != "no-such-process" {
			t.Errorf("%s listing %s: %v, want the typed no-such-process", who, id, err)
		}
	}
	e.inputErr("alice", cap, "call_tool", map[string]any{"id": st.ID}, "", "required")
	if _, err := e.try("alice", cap, "start_server", map[string]any{"command": "/bin/sh"}); typedCode(err) != "capability-denied" {
		t.Errorf("a command outside the exec list: %v", err)
	}

	var stop struct {
		Exit map[string]any `json:"exit"`
	}
	e.call("alice", cap, "stop_server", map[string]any{"id": st.ID, "grace_ms": 2000}, &stop)
	if stop.Exit["reason"] != "stopped" || (stop.Exit["exit_code"] == nil && stop.Exit["signal"] == nil) {
		t.Errorf("stop_server exit: %v", stop.Exit)
	}
}

// echoRound lists the server's tools and calls its echo tool as who,
// returning the instances the two calls ran on.
func echoRound(e *env, who, id, cursor, msg string) ([2]uint64, error) {
	var inst [2]uint64
	r, err := e.try(who, "mcp-stdio", "list_tools", map[string]any{"id": id, "cursor": cursor})
	if err != nil {
		return inst, fmt.Errorf("list_tools: %w", err)
	}
	var lt struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal([]byte(r.Output), &lt); err != nil || !hasTool(lt.Tools, "echo") {
		return inst, fmt.Errorf("list_tools: %s", r.Output)
	}
	inst[0] = r.Instance
	r, err = e.try(who, "mcp-stdio", "call_tool", map[string]any{"id": id, "name": "echo", "arguments": map[string]any{"message": msg}})
	if err != nil {
		return inst, fmt.Errorf("call_tool: %w", err)
	}
	var ct struct {
		Result struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.Output), &ct); err != nil || len(ct.Result.Content) == 0 || ct.Result.Content[0].Text != "Echo: "+msg {
		return inst, fmt.Errorf("call_tool echo %q: %s", msg, r.Output)
	}
	inst[1] = r.Instance
	return inst, nil
}

func hasTool(ts []struct{ Name string }, name string) bool {
	for _, t := range ts {
		if t.Name == name {
			return true
		}
	}
	return false
}

func jsonStrings(ms []json.RawMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m)
	}
	return out
}

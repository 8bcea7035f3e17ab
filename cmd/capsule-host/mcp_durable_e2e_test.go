//go:build !leanclient

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
)

// The bundled mcp-stdio capsule's third-party server outlives the daemon
// (issue 14: "It survives a daemon restart once the durability issue
// lands"): @modelcontextprotocol/server-everything is started through the
// capsule, answers a call, the built serve is killed with SIGKILL, and a
// new serve on the same state, with no pooled instance of the old one
// left, lists its tools and calls one on the same server, the same OS
// process. Each call frames its request and matches the response through
// read-since cursors, so no instance state had to survive, only the
// process and its log.
func TestMCPStdioSurvivesRestart(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	script := everythingScript(t)
	bin := builtBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The daemons share the test run's compilation cache (reexec_test.go).
	env := []string{daemon.CacheEnv + "=" + os.Getenv(daemon.CacheEnv)}
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	d1 := startServeEnv(t, bin, dir, env)
	awaitServing(t, c, d1)

	m, code := capsuleCall(t, c, "mcp-stdio", "alice", "start_server", map[string]any{"command": "node", "args": []string{script, "stdio"}})
	if code != "" {
		t.Fatalf("start_server: %s %v", code, m)
	}
	id, _ := m["id"].(string)
	echo(t, c, id, "before the restart")
	p1, err := c.Process(t.Context(), id)
	if err != nil || p1.PID == nil {
		t.Fatalf("the server's process: %v %+v", err, p1)
	}

	d1.cmd.Process.Signal(syscall.SIGKILL)
	<-d1.exited
	d2 := startServeEnv(t, bin, dir, env, "--on-shutdown", "stop")
	awaitServing(t, c, d2)

	p2, err := c.Process(t.Context(), id)
	if err != nil || p2.Phase != "running" || p2.PID == nil || *p2.PID != *p1.PID {
		t.Fatalf("after the restart the server is %+v (%v), before it was pid %d", p2, err, *p1.PID)
	}
	m, code = capsuleCall(t, c, "mcp-stdio", "alice", "list_tools", map[string]any{"id": id})
	if code != "" || !strings.Contains(mustJSONText(m), `"echo"`) {
		t.Fatalf("list_tools after the restart: %s %v", code, m)
	}
	echo(t, c, id, "after the restart")
	if _, code := capsuleCall(t, c, "mcp-stdio", "bob", "list_tools", map[string]any{"id": id}); code != api.CodeNoSuchProcess {
		t.Fatalf("bob after the restart: %q, want no-such-process", code)
	}
	var stop struct {
		Exit map[string]any `json:"exit"`
	}
	m, code = capsuleCall(t, c, "mcp-stdio", "alice", "stop_server", map[string]any{"id": id, "grace_ms": 2000})
	if b, _ := json.Marshal(m); code != "" || json.Unmarshal(b, &stop) != nil || stop.Exit["reason"] != "stopped" {
		t.Errorf("stop_server: %s %v", code, m)
	}
	endServe(t, d2) // --on-shutdown stop; a failed run's keepers go with stopKeepersAtEnd
}

// everythingScript is the entry point of @modelcontextprotocol/server-
// everything (make npm-deps).
func everythingScript(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("SKIP: node is not installed: run `make npm-deps`")
	}
	script, err := filepath.Abs(filepath.Join("testdata", "mcp-client", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Skipf("SKIP: @modelcontextprotocol/server-everything is not installed (%v): run `make npm-deps`", err)
	}
	// The bwrap sandbox mounts its own tmpfs on /tmp.
	if strings.HasPrefix(script, "/tmp/") {
		t.Skipf("SKIP: the checkout is under /tmp (%s), which the bwrap sandbox replaces with its own tmpfs: clone elsewhere to run this test", script)
	}
	return script
}

// echo calls the server's echo tool through the capsule and checks the
// answer.
func echo(t *testing.T, c *api.Client, id, msg string) {
	t.Helper()
	m, code := capsuleCall(t, c, "mcp-stdio", "alice", "call_tool", map[string]any{"id": id, "name": "echo", "arguments": map[string]any{"message": msg}})
	if code != "" || !strings.Contains(mustJSONText(m), "Echo: "+msg) {
		t.Fatalf("call_tool echo %q: %s %v", msg, code, m)
	}
}

func mustJSONText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

//go:build !leanclient

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/mcp"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// cliRole re-executes this test binary as the capsule-host command line,
// so an MCP client can spawn `capsule-host mcp` as a real subprocess
// without a separate build.
const cliRole = "capsule-host-cli-test"

func init() {
	reexec.Register(cliRole, func(args []string) int {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	})
}

// mcpStdio is one Go SDK client session with `capsule-host mcp` running
// as a subprocess.
type mcpStdio struct {
	cs      *sdk.ClientSession
	updated chan string
	changed chan struct{} // notifications/tools/list_changed
	stderr  *testutil.SyncBuffer
}

func (d *testDaemon) mcpSession(t testing.TB, principal string) *mcpStdio {
	t.Helper()
	stderr := &testutil.SyncBuffer{}
	cmd := reexec.Command(cliRole, "mcp", "--socket", d.sock, "--principal", principal)
	cmd.Stderr = stderr
	return dialMCP(t, &sdk.CommandTransport{Command: cmd}, stderr)
}

// dialMCP opens a Go SDK client session on transport.
func dialMCP(t testing.TB, transport sdk.Transport, stderr *testutil.SyncBuffer) *mcpStdio {
	t.Helper()
	m := &mcpStdio{updated: make(chan string, 64), changed: make(chan struct{}, 8), stderr: stderr}
	cl := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case m.changed <- struct{}{}:
			default:
			}
		},
		ResourceUpdatedHandler: func(_ context.Context, r *sdk.ResourceUpdatedNotificationRequest) {
			select {
			case m.updated <- r.Params.URI:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The legacy protocol version: resources/subscribe as a request, whose
	// answer the client returns (the TypeScript SDK speaks it too).
	cs, err := cl.Connect(ctx, transport, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connecting: %v\n%s", err, m.stderr)
	}
	m.cs = cs
	t.Cleanup(func() { m.close(t) })
	return m
}

// close ends the session: stdin closes, the subprocess exits (the
// transport waits for it, and signals it after 5 s).
func (m *mcpStdio) close(t testing.TB) {
	t.Helper()
	if m.cs == nil {
		return
	}
	if err := m.cs.Close(); err != nil {
		t.Logf("closing the MCP session: %v", err)
	}
	m.cs = nil
	if t.Failed() {
		t.Logf("capsule-host mcp stderr:\n%s", m.stderr)
	}
}

func (m *mcpStdio) call(t testing.TB, name string, args any, out any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := m.cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, m.stderr)
	}
	if out != nil {
		if res.IsError {
			t.Fatalf("%s: %v", name, res.Content[0].(*sdk.TextContent).Text)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %s: %v", name, b, err)
		}
	}
	return res
}

func (m *mcpStdio) waitUpdate(t testing.TB, uri string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case u := <-m.updated:
			if u == uri {
				return
			}
		case <-deadline:
			t.Fatalf("no resources/updated for %s within 30s", uri)
		}
	}
}

type procList struct {
	Processes []struct {
		ID, Phase, Label string
	}
}

// The Go SDK's client spawns `capsule-host mcp` over stdio against a real
// daemon: a process started through one session outlives it and is
// listed again by the next; a subscription is told of output and exit;
// another principal sees nothing.
func TestMCPStdioAgainstDaemon(t *testing.T) {
	d := startDaemon(t, nil)
	a := d.mcpSession(t, "alice")
	var spawned struct{ OK string }
	a.call(t, "testcap__spawn_persistent", map[string]any{
		"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", `while read l; do echo "got $l"; done`}},
		"options": map[string]any{"label": "reader", "keep_stdin_open": true},
	}, &spawned)
	id := spawned.OK
	if id == "" {
		t.Fatal("spawn returned no id")
	}
	a.close(t)

	// A new session (the client lost its context) finds it again.
	a = d.mcpSession(t, "alice")
	var pl procList
	a.call(t, "list_processes", map[string]any{}, &pl)
	if len(pl.Processes) != 1 || pl.Processes[0].ID != id || pl.Processes[0].Phase != "running" {
		t.Fatalf("list_processes after reconnecting: %+v", pl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, status := mcp.ProcessURI(id, "stdout"), mcp.ProcessURI(id, "status")
	for _, u := range []string{stdout, status} {
		if err := a.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: u}); err != nil {
			t.Fatalf("subscribe %s: %v", u, err)
		}
	}
	a.call(t, "testcap__write_stdin", map[string]any{"id": id, "data": "ping\n"}, &map[string]any{})
	a.waitUpdate(t, stdout)
	rr, err := a.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: stdout})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "got ping\n" {
		t.Fatalf("read %s: %v %+v", stdout, err, rr)
	}

	b := d.mcpSession(t, "bob")
	b.call(t, "list_processes", map[string]any{}, &pl)
	lr, err := b.cs.ListResources(ctx, nil)
	if len(pl.Processes) != 0 || err != nil || len(lr.Resources) != 0 {
		t.Fatalf("bob sees %+v / %v %+v", pl, err, lr)
	}
	if res := b.call(t, "stop_process", map[string]any{"id": id}, nil); !res.IsError ||
		!strings.Contains(res.Content[0].(*sdk.TextContent).Text, "no-such-process") {
		t.Fatalf("bob stopping alice's process: %+v", res)
	}

	cancelledWait(t, d, a, id)

	var stopped struct {
		ExitText string `json:"exit_text"`
	}
	a.call(t, "stop_process", map[string]any{"id": id, "grace_ms": 2000}, &stopped)
	a.waitUpdate(t, status)
	var st struct{ Phase string }
	a.call(t, "process_status", map[string]any{"id": id}, &st)
	if st.Phase != "exited" || !strings.HasPrefix(stopped.ExitText, "signal") && !strings.HasPrefix(stopped.ExitText, "exit") {
		t.Fatalf("after stop: phase %q, exit %q", st.Phase, stopped.ExitText)
	}
}

// Without a principal, or without a daemon, `capsule-host mcp` refuses at
// once with the fix, before speaking any protocol.
func TestMCPCommandRefusals(t *testing.T) {
	nosock := filepath.Join(t.TempDir(), "none.sock")
	t.Setenv("CAPSULE_HOST_PRINCIPAL", "")
	out, errOut, code := runCLI(t, "", "mcp", "--socket", nosock, "--principal", "alice")
	if code != exitUnreachable || !strings.Contains(errOut, "capsule-host serve") || out != "" {
		t.Fatalf("no daemon: exit %d, stderr %q, stdout %q", code, errOut, out)
	}
	d := startDaemon(t, nil)
	out, errOut, code = runCLI(t, "", "mcp", "--socket", d.sock)
	if code != exitUsage || !strings.Contains(errOut, "--principal") || !strings.Contains(errOut, "owner-fallback") || out != "" {
		t.Fatalf("no principal: exit %d, stderr %q, stdout %q", code, errOut, out)
	}
	// $CAPSULE_HOST_PRINCIPAL is the fallback; stdin at EOF ends the
	// session cleanly.
	t.Setenv("CAPSULE_HOST_PRINCIPAL", "alice")
	_, errOut, code = runCLI(t, "", "mcp", "--socket", d.sock)
	if code != exitOK {
		t.Fatalf("principal from the environment, empty stdin: exit %d, stderr %q", code, errOut)
	}
}

// nodeClient returns the directory of the pinned TypeScript SDK client,
// or skips (loudly, with the fix) when node or its packages are missing.
func nodeClient(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("testdata/mcp-client")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("SKIP: node is not installed, so the TypeScript SDK client cannot run: `make mcp-client` installs node and the pinned packages")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Skipf("SKIP: the TypeScript SDK is not installed in %s: run `make mcp-client` (npm ci from the lockfile)", dir)
	}
	return dir
}

// runNode runs client.mjs with env and fails the test unless it passes.
func runNode(t *testing.T, dir string, env ...string) {
	t.Helper()
	// Generous: under -race on a loaded machine every re-executed CLI is
	// slow to start; the script bounds each of its own waits at 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mcp-client: all checks passed") {
		t.Fatalf("the TypeScript SDK client: %v\n%s", err, out)
	}
}

// shellDaemon is a daemon with the shell capsule (from its directory, as
// the bundled one is) and testcap.
func shellDaemon(t testing.TB, mutate func(*config.Config)) *testDaemon {
	t.Helper()
	shell, err := filepath.Abs("../../capsules/shell")
	if err != nil {
		t.Fatal(err)
	}
	return startDaemon(t, func(c *config.Config) {
		c.Capsules = append(c.Capsules, shell)
		c.Backends.Enabled = []string{"local", "bwrap"} // testcap is local, the shell capsule bwrap
		if mutate != nil {
			mutate(c)
		}
	})
}

// The TypeScript SDK's client spawns `capsule-host mcp` (this test binary
// re-executed as the CLI: bash's exec -a sets the role as argv[0]).
func TestMCPNodeClientStdio(t *testing.T) {
	dir := nodeClient(t)
	d := shellDaemon(t, nil)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := func(principal string) string {
		b, _ := json.Marshal([]string{"bash", "-c", `exec -a "$0" "$@"`, cliRole, self, "mcp", "--socket", d.sock, "--principal", principal})
		return string(b)
	}
	runNode(t, dir, "MCP_TRANSPORT=stdio", "MCP_ALICE_CMD="+argv("alice"), "MCP_BOB_CMD="+argv("bob"))
}

const tokAlice, tokBob = "mcp-token-for-alice-0123456789", "mcp-token-for-bob-0123456789"

// tcpDaemon is shellDaemon with the loopback listener and two principals.
func tcpDaemon(t testing.TB) *testDaemon {
	t.Helper()
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	return shellDaemon(t, func(c *config.Config) {
		c.TCP.Listen = "127.0.0.1:0"
		c.Principals = map[string]config.Principal{
			"alice": {TokenSHA256: []string{hash(tokAlice)}},
			"bob":   {TokenSHA256: []string{hash(tokBob)}},
		}
	})
}

func httpSession(t testing.TB, d *testDaemon, tok string) *mcpStdio {
	t.Helper()
	hc := &http.Client{Transport: bearer{tok, http.DefaultTransport}}
	return dialMCP(t, &sdk.StreamableClientTransport{Endpoint: "http://" + d.tcp + "/mcp", HTTPClient: hc}, &testutil.SyncBuffer{})
}

// A capsule reload (here the runtime's Reload, which `reload`, SIGHUP and
// serve --watch all call) reaches every MCP client without its asking:
// over streamable HTTP the daemon re-syncs its sessions; over stdio the
// `capsule-host mcp` process hears it on its own session with the daemon's
// endpoint and re-syncs. Either way the client gets
// notifications/tools/list_changed, and a call to the new version works.
func TestMCPReloadListChanged(t *testing.T) {
	for _, tc := range []struct {
		name string
		dial func(t *testing.T, d *testDaemon) *mcpStdio
	}{
		{"stdio", func(t *testing.T, d *testDaemon) *mcpStdio { return d.mcpSession(t, "alice") }},
		{"streamable HTTP", func(t *testing.T, d *testDaemon) *mcpStdio { return httpSession(t, d, tokAlice) }},
	} {
		t.Run(tc.name, func(t *testing.T) { reloadListChanged(t, tc.dial) })
	}
}

func reloadListChanged(t *testing.T, dial func(t *testing.T, d *testDaemon) *mcpStdio) {
	dir := t.TempDir()
	for _, f := range []string{"Capsule.toml", "testcap.wasm"} {
		b, err := os.ReadFile(filepath.Join(testcapDir(t), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	d := startDaemon(t, func(c *config.Config) {
		c.Capsules = []string{dir}
		c.TCP.Listen = "127.0.0.1:0"
		c.Principals = map[string]config.Principal{"alice": {TokenSHA256: []string{hash(tokAlice)}}}
	})
	a := dial(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for len(a.changed) > 0 { // anything the session's start sent
		<-a.changed
	}
	m := filepath.Join(dir, "Capsule.toml")
	b, _ := os.ReadFile(m)
	if err := os.WriteFile(m, bytes.Replace(b, []byte(`version = "1.0.0"`), []byte(`version = "1.0.1"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := d.rt.Reload(ctx, "testcap")
	if err != nil || len(res.Replaced) != 1 {
		t.Fatalf("reload: %+v %v", res, err)
	}
	t0 := time.Now()
	// No tools/list or call before this: the notification is pushed.
	select {
	case <-a.changed:
	case <-time.After(20 * time.Second):
		t.Fatalf("no notifications/tools/list_changed within 20s of the reload\n%s", a.stderr)
	}
	t.Logf("list_changed %v after the reload", time.Since(t0))
	a.call(t, "testcap__echo", map[string]any{"x": 1}, &map[string]any{})
}

// The daemon's streamable-HTTP endpoint with the Go SDK client: over TCP
// the token is the principal; over the socket the operator names it; a
// session ID is bound to its principal.
func TestMCPHTTPAgainstDaemon(t *testing.T) {
	d := tcpDaemon(t)
	a := httpSession(t, d, tokAlice)
	var spawned struct{ OK string }
	a.call(t, "testcap__spawn_persistent", map[string]any{
		"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", `while read l; do echo "got $l"; done`}},
		"options": map[string]any{"keep_stdin_open": true},
	}, &spawned)
	id := spawned.OK
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout := mcp.ProcessURI(id, "stdout")
	if err := a.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: stdout}); err != nil {
		t.Fatal(err)
	}
	a.call(t, "testcap__write_stdin", map[string]any{"id": id, "data": "over http\n"}, &map[string]any{})
	a.waitUpdate(t, stdout)
	rr, err := a.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: stdout})
	if err != nil || rr.Contents[0].Text != "got over http\n" {
		t.Fatalf("read: %v %+v", err, rr)
	}

	cancelledWait(t, d, a, id)

	b := httpSession(t, d, tokBob)
	var pl procList
	b.call(t, "list_processes", map[string]any{}, &pl)
	if len(pl.Processes) != 0 {
		t.Fatalf("bob lists %+v", pl)
	}

	// Bob presenting alice's session ID gets what an unknown ID gets.
	post := func(tok, sid string) int {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.tcp+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	sid := a.cs.ID()
	if sid == "" {
		t.Fatal("no session ID")
	}
	if hijack, unknown := post(tokBob, sid), post(tokBob, "00000000000000000000000000000000"); hijack != http.StatusNotFound || unknown != hijack {
		t.Fatalf("bob with alice's session: %d; with an unknown one: %d", hijack, unknown)
	}
	if code := post("", sid); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}

	// The socket: the operator names the principal, and must.
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.sock)
	}}}
	resp, err := unix.Post("http://capsule-host/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("socket without a principal: %d", resp.StatusCode)
	}
	s := dialMCP(t, &sdk.StreamableClientTransport{Endpoint: "http://capsule-host/mcp?principal=alice", HTTPClient: unix}, &testutil.SyncBuffer{})
	s.call(t, "list_processes", map[string]any{}, &pl)
	if len(pl.Processes) != 1 || pl.Processes[0].ID != id {
		t.Fatalf("alice over the socket lists %+v", pl)
	}
	var stopped map[string]any
	s.call(t, "stop_process", map[string]any{"id": id}, &stopped)
}

// The TypeScript SDK's client over streamable HTTP against the daemon's
// loopback listener.
func TestMCPNodeClientHTTP(t *testing.T) {
	dir := nodeClient(t)
	d := tcpDaemon(t)
	runNode(t, dir, "MCP_TRANSPORT=http", "MCP_URL=http://"+d.tcp+"/mcp", "MCP_ALICE_TOKEN="+tokAlice, "MCP_BOB_TOKEN="+tokBob)
}

// Raw JSON-RPC on the stdio server: a malformed line and an unknown
// method get JSON-RPC errors, and the session goes on.
func TestMCPStdioBadJSONRPC(t *testing.T) {
	d := startDaemon(t, nil)
	cmd := reexec.Command(cliRole, "mcp", "--socket", d.sock, "--principal", "alice")
	stderr := &testutil.SyncBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("capsule-host mcp exited with %v\n%s", err, stderr)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("capsule-host mcp did not exit within 20s of stdin closing")
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(s string) {
		if _, err := io.WriteString(stdin, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	// answer returns the next message with the given id.
	answer := func(id string) map[string]any {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("stdout closed waiting for id %s\n%s", id, stderr)
				}
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) != nil {
					t.Fatalf("not JSON on stdout: %q", l)
				}
				if fmt.Sprint(m["id"]) == id {
					return m
				}
			case <-deadline:
				t.Fatalf("no answer with id %s within 20s\n%s", id, stderr)
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := answer("1"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"no/such/method","params":{}}`)
	if m := answer("2"); m["error"] == nil {
		t.Fatalf("unknown method: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"no__such_tool","arguments":{}}}`)
	if m := answer("3"); m["error"] == nil {
		t.Fatalf("unknown tool: %v", m)
	}
	// A malformed line, and JSON that is no JSON-RPC message: parse error
	// and invalid request (id null), and the session goes on.
	send(`{"jsonrpc":"2.0","id":4,`)
	if m := answer("<nil>"); fmt.Sprint(m["error"].(map[string]any)["code"]) != "-32700" {
		t.Fatalf("malformed line: %v", m)
	}
	send(`42`)
	if m := answer("<nil>"); fmt.Sprint(m["error"].(map[string]any)["code"]) != "-32600" {
		t.Fatalf("not a message: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`)
	m := answer("5")
	if res, _ := m["result"].(map[string]any); res == nil || !strings.Contains(fmt.Sprint(res["tools"]), "testcap__echo") {
		t.Fatalf("tools/list after a malformed line: %v", m)
	}
}

// Long calls report progress to a client that gave a progress token; a
// capsule that went away is noticed at the next call, and the tool list
// follows with notifications/tools/list_changed.
func TestMCPProgressAndListChanged(t *testing.T) {
	d := shellDaemon(t, nil)
	progress := make(chan float64, 16)
	changed := make(chan struct{}, 4)
	stderr := &testutil.SyncBuffer{}
	cmd := reexec.Command(cliRole, "mcp", "--socket", d.sock, "--principal", "alice")
	cmd.Stderr = stderr
	cl := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			select {
			case progress <- r.Params.Progress:
			default:
			}
		},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := cl.Connect(ctx, &sdk.CommandTransport{Command: cmd}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	m := &mcpStdio{cs: cs, stderr: stderr}
	var spawned struct{ OK string }
	m.call(t, "testcap__spawn_persistent", map[string]any{
		"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "exec sleep 600"}},
	}, &spawned)
	// wait on a process that keeps running: the call lasts its timeout.
	p := &sdk.CallToolParams{Name: "testcap__wait", Arguments: map[string]any{"id": spawned.OK, "timeout_ms": 2500}}
	p.SetProgressToken("tok-1")
	if _, err := cs.CallTool(ctx, p); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-progress:
		if n < 1 {
			t.Fatalf("progress %v", n)
		}
	default:
		t.Fatal("a 2.5 s call with a progress token sent no progress notification")
	}
	m.call(t, "stop_process", map[string]any{"id": spawned.OK, "grace_ms": 0}, &map[string]any{})

	if err := d.rt.Host.Remove(ctx, "shell"); err != nil {
		t.Fatal(err)
	}
	res := m.call(t, "shell__run_shell_command", map[string]any{"command": "true"}, nil)
	if !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "no-such-capsule") {
		t.Fatalf("a removed capsule's tool: %+v", res)
	}
	select {
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Fatal("no notifications/tools/list_changed within 20s of the capsule going away")
	}
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		if strings.HasPrefix(tl.Name, "shell__") {
			t.Fatalf("tools/list still has %s", tl.Name)
		}
	}
}

// @modelcontextprotocol/inspector-cli (pinned beside the SDK) in its CLI
// mode lists the tools of `capsule-host mcp` and calls one.
func TestMCPInspectorCLI(t *testing.T) {
	dir := nodeClient(t)
	cli := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector-cli", "build", "cli.js")
	if _, err := os.Stat(cli); err != nil {
		t.Skipf("SKIP: inspector-cli is not installed in %s: run `make mcp-client`", dir)
	}
	d := startDaemon(t, nil)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The server command is a script, so none of its flags reach the
	// inspector's own option parser.
	script := filepath.Join(t.TempDir(), "capsule-host-mcp.sh")
	body := fmt.Sprintf("#!/bin/bash\nexec -a %q %q mcp --socket %q --principal alice\n", cliRole, self, d.sock)
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	inspect := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		argv := append([]string{cli, "--cli", script}, args...)
		cmd := exec.CommandContext(ctx, "node", argv...)
		// inspector-cli 1.0.3 tests for "../package.json" relative to the
		// working directory but imports it relative to its module: run it
		// from its build directory, where both mean its own package.json.
		cmd.Dir = filepath.Dir(cli)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("inspector-cli %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := inspect("--method", "tools/list"); !strings.Contains(out, `"testcap__echo"`) || !strings.Contains(out, `"list_processes"`) {
		t.Fatalf("inspector-cli tools/list:\n%s", out)
	}
	out := inspect("--method", "tools/call", "--tool-name", "testcap__echo", "--tool-arg", "said=hello")
	if !strings.Contains(out, "hello") || strings.Contains(out, `"isError": true`) {
		t.Fatalf("inspector-cli tools/call:\n%s", out)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct{ id, data string }

// readSSE reads events from r until stop says so or r ends.
func readSSE(r io.Reader, stop func(sseEvent) bool) []sseEvent {
	var evs []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" {
				evs = append(evs, cur)
				if stop(cur) {
					return evs
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id:"):
			cur.id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			cur.data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		}
	}
	return evs
}

// Raw streamable HTTP: a call's SSE response stream is resumable: a GET
// with Last-Event-ID of its progress event replays the result after it.
func TestMCPHTTPResumableSSE(t *testing.T) {
	d := tcpDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sid := ""
	do := func(method, body string, hdr map[string]string) *http.Response {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+d.tcp+"/mcp", rd)
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	all := func(sseEvent) bool { return false }
	resp := do("POST", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	sid = resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	readSSE(resp.Body, all)
	if resp := do("POST", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil); resp.StatusCode/100 != 2 {
		t.Fatalf("initialized: %d", resp.StatusCode)
	}
	resp = do("POST", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testcap__spawn_persistent","arguments":{"request":{"cmd":"/bin/sh","args":["-c","exec sleep 600"]}}}}`, nil)
	evs := readSSE(resp.Body, all)
	var spawn struct {
		Result struct {
			StructuredContent struct{ OK string } `json:"structuredContent"`
		}
	}
	if len(evs) == 0 || json.Unmarshal([]byte(evs[len(evs)-1].data), &spawn) != nil || spawn.Result.StructuredContent.OK == "" {
		t.Fatalf("spawn: %+v", evs)
	}
	id := spawn.Result.StructuredContent.OK
	// wait on a running process for 1.5 s, with a progress token: a
	// progress event, then the result.
	resp = do("POST", fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"testcap__wait","arguments":{"id":%q,"timeout_ms":1500}}}`, id), nil)
	evs = readSSE(resp.Body, all)
	if len(evs) < 2 || !strings.Contains(evs[0].data, "notifications/progress") || evs[0].id == "" || !strings.Contains(evs[len(evs)-1].data, `"id":3`) {
		t.Fatalf("the call's stream: %+v", evs)
	}
	resp = do("GET", "", map[string]string{"Last-Event-ID": evs[0].id})
	if resp.StatusCode != 200 {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	replay := readSSE(resp.Body, func(e sseEvent) bool { return strings.Contains(e.data, `"id":3`) })
	if len(replay) == 0 || !strings.Contains(replay[len(replay)-1].data, `"id":3`) {
		t.Fatalf("resuming after %s replayed %+v", evs[0].id, replay)
	}
	// DELETE ends the session; its ID is unknown from then on.
	if resp := do("DELETE", "", nil); resp.StatusCode/100 != 2 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	if resp := do("POST", `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("after delete: %d", resp.StatusCode)
	}
}

// cancelledWait starts a long testcap wait on the running process id,
// cancels it from the client, and checks that the call returns at once
// and that the daemon saw the guest call cancelled (not timed out).
func cancelledWait(t *testing.T, d *testDaemon, m *mcpStdio, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := m.cs.CallTool(ctx, &sdk.CallToolParams{Name: "testcap__wait", Arguments: map[string]any{"id": id, "timeout_ms": 25000}})
		errc <- err
	}()
	time.AfterFunc(300*time.Millisecond, cancel)
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled call returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled call did not return within 20s")
	}
	waitFor(t, func() bool {
		for _, l := range strings.Split(d.logs.String(), "\n") {
			if strings.Contains(l, "call failed") && strings.Contains(l, "tool=wait") && strings.Contains(l, "code=cancelled") {
				return true
			}
		}
		return false
	})
}

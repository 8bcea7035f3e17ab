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

	api "github.com/capsule-host/capsule-host/client"
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

// mcpSessionTCP is mcpSession over --tcp with a token: descriptors
// cannot cross TCP, so `capsule-host mcp` relays (serves the session
// itself and calls the API).
func (d *testDaemon) mcpSessionTCP(t testing.TB, token string) *mcpStdio {
	t.Helper()
	stderr := &testutil.SyncBuffer{}
	cmd := reexec.Command(cliRole, "mcp", "--tcp", d.tcp)
	cmd.Env = append(os.Environ(), "CAPSULE_HOST_TOKEN="+token)
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
// once with the fix, before speaking any protocol. The principal comes
// from --principal, $CAPSULE_HOST_PRINCIPAL or the config's [mcp]
// principal, in that order, and never is an owner-fallback.
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
	// The config's [mcp] principal is the last resort; an owner-fallback
	// principal there is a config error, refused before anything runs.
	cfgFile := func(principal string) string {
		p := filepath.Join(t.TempDir(), "capsule-host.toml")
		if err := os.WriteFile(p, []byte("[mcp]\nprincipal = \""+principal+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, errOut, code := runCLI(t, "", "mcp", "--socket", d.sock, "--config", cfgFile("alice")); code != exitOK {
		t.Fatalf("principal from the config, empty stdin: exit %d, stderr %q", code, errOut)
	}
	if out, errOut, code := runCLI(t, "", "mcp", "--socket", d.sock, "--config", cfgFile("owner:testcap")); code == exitOK || out != "" ||
		!strings.Contains(errOut, "mcp.principal") || !strings.Contains(errOut, "owner-fallback") {
		t.Fatalf("an owner-fallback principal in the config: exit %d, stderr %q, stdout %q", code, errOut, out)
	}
	// $CAPSULE_HOST_PRINCIPAL comes before the config; stdin at EOF ends
	// the session cleanly.
	t.Setenv("CAPSULE_HOST_PRINCIPAL", "alice")
	_, errOut, code = runCLI(t, "", "mcp", "--socket", d.sock, "--config", cfgFile("bob"))
	if code != exitOK {
		t.Fatalf("principal from the environment, empty stdin: exit %d, stderr %q", code, errOut)
	}
}

// The session's principal: --principal, else $CAPSULE_HOST_PRINCIPAL,
// else the config's [mcp] principal; over TCP the token's, and a
// different name from any of them is refused; none at all is refused.
func TestMCPPrincipalOrder(t *testing.T) {
	for _, c := range []struct {
		flag, env, cfg, token, want string
		fails                       bool
	}{
		{flag: "f", env: "e", cfg: "c", want: "f"},
		{env: "e", cfg: "c", want: "e"},
		{cfg: "c", want: "c"},
		{fails: true},
		{token: "t", want: "t"},
		{cfg: "t", token: "t", want: "t"},
		{cfg: "c", token: "t", fails: true},
		{flag: "f", token: "t", fails: true},
	} {
		t.Setenv("CAPSULE_HOST_PRINCIPAL", c.env)
		cfg := config.Default()
		cfg.MCP.Principal = c.cfg
		got, err := mcpPrincipal(&opts{principal: c.flag}, api.Health{Principal: c.token}, cfg)
		if c.fails != (err != nil) || got != c.want {
			t.Errorf("%+v: %q, %v", c, got, err)
		}
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
// over streamable HTTP and handed-off stdio the daemon re-syncs its
// sessions; a relaying `capsule-host mcp` (over --tcp) hears it on its own
// session with the daemon's endpoint and re-syncs. Either way the client gets
// notifications/tools/list_changed, and a call to the new version works.
func TestMCPReloadListChanged(t *testing.T) {
	for _, tc := range []struct {
		name string
		dial func(t *testing.T, d *testDaemon) *mcpStdio
	}{
		{"stdio", func(t *testing.T, d *testDaemon) *mcpStdio { return d.mcpSession(t, "alice") }},
		{"streamable HTTP", func(t *testing.T, d *testDaemon) *mcpStdio { return httpSession(t, d, tokAlice) }},
		{"stdio relayed over tcp", func(t *testing.T, d *testDaemon) *mcpStdio { return d.mcpSessionTCP(t, tokAlice) }},
	} {
		t.Run(tc.name, func(t *testing.T) { reloadListChanged(t, tc.dial) })
	}
}

func reloadListChanged(t *testing.T, dial func(t *testing.T, d *testDaemon) *mcpStdio) {
	dir := t.TempDir()
	testutil.CopyFiles(t, testcapDir(t), dir, "Capsule.toml", "testcap.wasm")
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

// rawMCP is `capsule-host mcp` as a subprocess with pipes, for raw
// JSON-RPC: lines carries its stdout's lines (closed at their end). The
// test's end kills it if it still runs.
type rawMCP struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	exited chan error
	stderr *testutil.SyncBuffer
	waited bool
	err    error
}

func startRawMCP(t *testing.T, d *testDaemon) *rawMCP {
	t.Helper()
	r := &rawMCP{lines: make(chan string, 16), exited: make(chan error, 1), stderr: &testutil.SyncBuffer{}}
	r.cmd = reexec.Command(cliRole, "mcp", "--socket", d.sock, "--principal", "alice")
	r.cmd.Stderr = r.stderr
	var err error
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	t.Cleanup(func() {
		if ok, _ := r.wait(0); !ok {
			r.cmd.Process.Kill()
			r.wait(time.Minute)
		}
	})
	return r
}

// wait waits up to d for the exit: whether it came, and its error.
func (r *rawMCP) wait(d time.Duration) (bool, error) {
	if !r.waited {
		select {
		case r.err = <-r.exited:
			r.waited = true
		case <-time.After(d):
		}
	}
	return r.waited, r.err
}

// closeAndWait closes stdin (the client leaves) and waits up to d.
func (r *rawMCP) closeAndWait(d time.Duration) (bool, error) {
	r.stdin.Close()
	return r.wait(d)
}

func (r *rawMCP) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(r.stdin, s+"\n"); err != nil {
		t.Fatal(err)
	}
}

// answer returns the next message with the given id ("<nil>": none).
func (r *rawMCP) answer(t *testing.T, id string) map[string]any {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("stdout closed waiting for id %s\n%s", id, r.stderr)
			}
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) != nil {
				t.Fatalf("not a JSON object on stdout: %q", l)
			}
			if fmt.Sprint(m["id"]) == id {
				return m
			}
		case <-deadline:
			t.Fatalf("no answer with id %s within 30s\n%s", id, r.stderr)
		}
	}
}

const rawInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// Raw JSON-RPC on the stdio server (handed off: the daemon's
// FileTransport): a malformed line and an unknown method get JSON-RPC
// errors, and the session goes on; a batch is answered as a batch.
func TestMCPStdioBadJSONRPC(t *testing.T) {
	d := startDaemon(t, nil)
	r := startRawMCP(t, d)
	t.Cleanup(func() {
		if ok, err := r.closeAndWait(20 * time.Second); !ok || err != nil {
			t.Errorf("capsule-host mcp, 20s after stdin closed: exited %v, %v\n%s", ok, err, r.stderr)
		}
	})
	send := func(s string) { r.send(t, s) }
	answer := func(id string) map[string]any { return r.answer(t, id) }
	lines, stderr := r.lines, r.stderr
	send(rawInitialize)
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
	// A batch (protocol versions before 2025-06-18) is answered as one.
	send(`[{"jsonrpc":"2.0","id":6,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","id":"seven","method":"ping"}]`)
	select {
	case l := <-lines:
		var got []struct {
			ID     any
			Result map[string]any
		}
		if err := json.Unmarshal([]byte(l), &got); err != nil || len(got) != 2 || got[0].ID != float64(6) || got[1].ID != "seven" || got[0].Result == nil {
			t.Fatalf("the batch's answer: %s (%v)", l, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no answer to the batch within 20s\n%s", stderr)
	}
	send(`[]`)
	if m := answer("<nil>"); fmt.Sprint(m["error"].(map[string]any)["code"]) != "-32600" {
		t.Fatalf("an empty batch: %v", m)
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
	if err := writeExecutable(script, []byte(body)); err != nil {
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

// The stdio hand-off: the session runs in the daemon, over the client's
// pipes. With `capsule-host mcp` stopped (SIGSTOP) a call is still
// answered, which a relaying process could not do; killed, it takes the
// session with it: the daemon closes the client's stdout at once.
func TestMCPStdioHandOffServedByDaemon(t *testing.T) {
	d := startDaemon(t, nil)
	r := startRawMCP(t, d)
	r.send(t, rawInitialize)
	if m := r.answer(t, "1"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	r.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testcap__echo","arguments":{"while":"stopped"}}}`)
	if m := r.answer(t, "2"); m["result"] == nil {
		t.Fatalf("a call while capsule-host mcp is stopped: %v", m)
	}
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.wait(time.Minute)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case _, open := <-r.lines:
			if !open {
				return
			}
		case <-deadline:
			t.Fatal("the client's stdout stayed open 20s after capsule-host mcp was killed: the daemon kept the session")
		}
	}
}

// A handed-off session outlives the daemon: `capsule-host mcp` gives the
// same stdio to the next daemon with the session's state, so the client's
// session goes on without a new initialize, and it is told that the tool
// list may have changed.
func TestMCPStdioHandOffResumes(t *testing.T) {
	d := startDaemon(t, nil)
	m := d.mcpSession(t, "alice")
	var out map[string]any
	m.call(t, "testcap__echo", map[string]any{"before": 1}, &out)
	for len(m.changed) > 0 {
		<-m.changed
	}
	d.restart(t)
	// An uninitialized session would refuse this call.
	m.call(t, "testcap__echo", map[string]any{"after": 2}, &out)
	if out["after"] != float64(2) {
		t.Fatalf("echo on the next daemon: %v", out)
	}
	select {
	case <-m.changed:
	case <-time.After(20 * time.Second):
		t.Fatal("no notifications/tools/list_changed within 20s of the session's resumption")
	}
}

// While `capsule-host mcp` waits for the next daemon (this one stopped
// and none came), the MCP client leaving (stdin closed) ends it: it exits
// 0 on its own, not by a signal.
func TestMCPStdioHandOffClientLeavesMeanwhile(t *testing.T) {
	d := startDaemon(t, nil)
	r := startRawMCP(t, d)
	r.send(t, rawInitialize)
	if m := r.answer(t, "1"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	d.stop(t)
	if ok, err := r.closeAndWait(30 * time.Second); !ok || err != nil {
		t.Fatalf("capsule-host mcp, 30s after its client left while no daemon ran: exited %v, %v\n%s", ok, err, r.stderr)
	}
}

// Over --tcp `capsule-host mcp` relays: calls, processes, subscriptions
// and updates through the API, as the token's principal.
func TestMCPStdioRelayOverTCP(t *testing.T) {
	d := tcpDaemon(t)
	m := d.mcpSessionTCP(t, tokAlice)
	var spawned struct{ OK string }
	m.call(t, "testcap__spawn_persistent", map[string]any{
		"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", `while read l; do echo "got $l"; done`}},
		"options": map[string]any{"keep_stdin_open": true},
	}, &spawned)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout := mcp.ProcessURI(spawned.OK, "stdout")
	if err := m.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: stdout}); err != nil {
		t.Fatal(err)
	}
	m.call(t, "testcap__write_stdin", map[string]any{"id": spawned.OK, "data": "relayed\n"}, &map[string]any{})
	m.waitUpdate(t, stdout)
	rr, err := m.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: stdout})
	if err != nil || rr.Contents[0].Text != "got relayed\n" {
		t.Fatalf("read: %v %+v", err, rr)
	}
	var pl procList
	d.mcpSessionTCP(t, tokBob).call(t, "list_processes", map[string]any{}, &pl)
	if len(pl.Processes) != 0 {
		t.Fatalf("bob lists %+v", pl)
	}
	m.call(t, "stop_process", map[string]any{"id": spawned.OK, "grace_ms": 0}, &map[string]any{})
}

// Over streamable HTTP: a tool's err result, a trap and a timeout are
// isError with the typed reason; resources/list holds the caller's
// processes and no one else's; a malformed JSON-RPC body, a message that is
// no JSON-RPC, and an unknown method get JSON-RPC errors, and the session
// goes on.
func TestMCPHTTPErrorsAndResources(t *testing.T) {
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	d := startDaemon(t, func(c *config.Config) {
		c.TCP.Listen = "127.0.0.1:0"
		c.CallTimeout = config.Duration(time.Second)
		c.Principals = map[string]config.Principal{"alice": {TokenSHA256: []string{hash(tokAlice)}}, "bob": {TokenSHA256: []string{hash(tokBob)}}}
	})
	a := httpSession(t, d, tokAlice)
	for _, c := range []struct {
		tool string
		args map[string]any
		code string
	}{
		{"testcap__fail", map[string]any{"message": "boom"}, "tool-error"},
		{"testcap__exit", map[string]any{"code": 3}, "trap"},
		{"testcap__spin", map[string]any{"duration_ms": 30000}, "timeout"},
	} {
		res := a.call(t, c.tool, c.args, nil)
		sc, _ := res.StructuredContent.(map[string]any)
		e, _ := sc["error"].(map[string]any)
		if !res.IsError || e["code"] != c.code || res.Meta["capsule-host/error-code"] != c.code {
			t.Fatalf("%s: isError %v, structured %v, meta %v; want %s", c.tool, res.IsError, sc, res.Meta, c.code)
		}
	}

	var spawned struct{ OK string }
	a.call(t, "testcap__spawn_persistent", map[string]any{"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "exec sleep 600"}}}, &spawned)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lr, err := a.cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	uris := map[string]bool{}
	for _, r := range lr.Resources {
		uris[r.URI] = true
	}
	for _, s := range []string{"status", "stdout", "stderr"} {
		if !uris[mcp.ProcessURI(spawned.OK, s)] || len(uris) != 3 {
			t.Fatalf("alice's resources/list: %v", uris)
		}
	}
	if lr, err := httpSession(t, d, tokBob).cs.ListResources(ctx, nil); err != nil || len(lr.Resources) != 0 {
		t.Fatalf("bob's resources/list: %v %+v", err, lr)
	}

	// Raw requests in alice's session (2025-11-25), and one of the newest
	// protocol, which has no session.
	post := func(body, version string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.tcp+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Protocol-Version", version)
		if version == a.cs.InitializeResult().ProtocolVersion {
			req.Header.Set("Mcp-Session-Id", a.cs.ID())
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The SDK answers as the transport's spec says: input it cannot take
	// is an HTTP error status (400); an unknown method too before
	// 2026-07-28, and from then on a JSON-RPC -32601 error (with 404).
	legacy := a.cs.InitializeResult().ProtocolVersion
	for _, c := range []struct {
		body, version string
		status        int
		rpcCode       float64 // 0: no JSON-RPC error body expected
	}{
		{`{"jsonrpc":"2.0","id":71,`, legacy, http.StatusBadRequest, 0},
		{`42`, legacy, http.StatusBadRequest, 0},
		{`{"jsonrpc":"2.0","id":72,"method":"no/such/method","params":{}}`, legacy, http.StatusBadRequest, 0},
		{`{"jsonrpc":"2.0","id":73,"method":"no/such/method","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
			`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`, "2026-07-28", http.StatusNotFound, -32601},
	} {
		status, body := post(c.body, c.version)
		var rpc struct {
			ID    any
			Error struct{ Code float64 }
		}
		if status != c.status || c.rpcCode != 0 && (json.Unmarshal([]byte(body), &rpc) != nil || rpc.Error.Code != c.rpcCode || rpc.ID != float64(73)) {
			t.Fatalf("%s (%s): %d %s; want %d", c.body, c.version, status, body, c.status)
		}
	}
	var out map[string]any
	a.call(t, "testcap__echo", map[string]any{"still": true}, &out)
	a.call(t, "stop_process", map[string]any{"id": spawned.OK, "grace_ms": 0}, &map[string]any{})
}

package mcp_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/mcp"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// TestMain lets the backends re-execute this test binary as their helpers.
func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }

// startDaemon runs a real daemon (the conformance capsule testcap) on a
// temporary socket and returns an API client for it.
func startDaemon(t *testing.T) *api.Client {
	t.Helper()
	c, _ := startDaemonWith(t, nil)
	return c
}

// startDaemonWith is startDaemon with the config changed by mutate; it
// also returns the socket's path.
func startDaemonWith(t *testing.T, mutate func(*config.Config)) (*api.Client, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.SetStateDir(filepath.Join(dir, "state"))
	cfg.Socket = filepath.Join(dir, "d.sock")
	cfg.Backends.Enabled = []string{"local"} // testcap's backend
	cfg.Processes.OnShutdown = config.OnShutdownStop
	off := false
	cfg.Bundled = &off
	cfg.Capsules = []string{testcapDir(t)}
	cfg.ShutdownGrace = config.Duration(3 * time.Second)
	if mutate != nil {
		mutate(cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sock, err := daemon.ListenSocket(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := daemon.Open(ctx, cfg, daemon.Options{Log: slog.New(slog.DiscardHandler), Version: "test"})
	if err != nil {
		sock.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- daemon.Serve(ctx, rt, sock, nil, cfg.ShutdownGrace.D()) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("the daemon did not stop within 60s")
		}
	})
	return api.NewUnix(cfg.Socket), cfg.Socket
}

func testcapDir(t *testing.T) string {
	t.Helper()
	tc, err := filepath.Abs("../../../../capsules/testcap")
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// session is one in-process MCP client session against an mcp.Server.
type session struct {
	cs      *sdk.ClientSession
	updated chan string
	changed chan struct{}
	// acked gets the resource URIs of each subscriptions/listen stream the
	// server acknowledged (2026-07-28 and later).
	acked chan []string
}

// legacy is the newest protocol version with resources/subscribe as a
// request (the TypeScript SDK's); the Go SDK's default (2026-07-28)
// subscribes with subscriptions/listen, whose refusals its client does not
// return from Subscribe.
const legacy = "2025-11-25"

func connect(t *testing.T, d mcp.Daemon, o mcp.Options, version ...string) *session {
	t.Helper()
	srv, err := mcp.New(d, o)
	if err != nil {
		t.Fatal(err)
	}
	return attach(t, srv, version...)
}

// attach connects one more in-process client session to srv.
func attach(t *testing.T, srv *mcp.Server, version ...string) *session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if err := srv.SyncTools(ctx); err != nil {
		t.Fatal(err)
	}
	st, ct := sdk.NewInMemoryTransports()
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, st) }()
	s := &session{updated: make(chan string, 256), changed: make(chan struct{}, 16), acked: make(chan []string, 64)}
	copts := &sdk.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *sdk.ResourceUpdatedNotificationRequest) {
			select {
			case s.updated <- r.Params.URI:
			default:
			}
		},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case s.changed <- struct{}{}:
			default:
			}
		},
	}
	var sopts *sdk.ClientSessionOptions
	if len(version) > 0 {
		sopts = &sdk.ClientSessionOptions{ProtocolVersion: version[0]}
	}
	cl := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, copts)
	cl.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if p, ok := req.GetParams().(*sdk.SubscriptionsAcknowledgedParams); ok && method == "notifications/subscriptions/acknowledged" {
				select {
				case s.acked <- p.Notifications.ResourceSubscriptions:
				default:
				}
			}
			return next(ctx, method, req)
		}
	})
	cs, err := cl.Connect(ctx, ct, sopts)
	if err != nil {
		t.Fatal(err)
	}
	s.cs = cs
	t.Cleanup(func() {
		cs.Close()
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			t.Error("the MCP server did not end within 30s of the client leaving")
		}
		cancel()
	})
	return s
}

func call(t *testing.T, s *session, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// errCode is the typed code of a failed call.
func errCode(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want an error result, got %+v", res.StructuredContent)
	}
	m, _ := res.StructuredContent.(map[string]any)
	e, _ := m["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func structured(t *testing.T, res *sdk.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %v", res.Content[0].(*sdk.TextContent).Text)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

// spawnReader starts, as s's principal, a persistent process that echoes
// each stdin line as "got LINE", and returns its ID.
func spawnReader(t *testing.T, s *session) string {
	t.Helper()
	res := call(t, s, "testcap__spawn_persistent", map[string]any{
		"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", `while read l; do echo "got $l"; done`}},
		"options": map[string]any{"label": "reader", "keep_stdin_open": true},
	})
	var out struct {
		OK    string `json:"ok"`
		Error any    `json:"error"`
	}
	structured(t, res, &out)
	if out.OK == "" {
		t.Fatalf("spawn: %+v", out)
	}
	return out.OK
}

// subscribe subscribes s to uri and returns once the subscription is live.
// On 2026-07-28 and later that is when the server acknowledges the
// subscriptions/listen stream: the Go SDK's Subscribe sends the request
// and returns at once, so output caused right after it (through another
// session) can reach the daemon before the server took the subscription's
// starting cursor, and is then history, not news.
func subscribe(t *testing.T, s *session, uri string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribe %s: %v", uri, err)
	}
	if s.cs.InitializeResult().ProtocolVersion < "2026-07-28" {
		return // resources/subscribe: live once answered
	}
	for {
		select {
		case uris := <-s.acked:
			if slices.Contains(uris, uri) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no subscriptions/acknowledged for %s within a minute", uri)
		}
	}
}

func waitUpdate(t *testing.T, s *session, uri string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case u := <-s.updated:
			if u == uri {
				return
			}
		case <-deadline:
			t.Fatalf("no resources/updated for %s within 30s", uri)
		}
	}
}

func TestToolNames(t *testing.T) {
	if n := mcp.ToolName("my-cap", "run_it"); n != "my-cap__run_it" {
		t.Fatalf("ToolName = %q", n)
	}
	c, tool, ok := mcp.SplitToolName("my-cap__run__it")
	if !ok || c != "my-cap" || tool != "run__it" {
		t.Fatalf("SplitToolName = %q %q %v", c, tool, ok)
	}
	if _, _, ok := mcp.SplitToolName("list_processes"); ok {
		t.Fatal("a process tool's name split as a capsule tool")
	}
	if n := mcp.ToolName(strings.Repeat("c", 63), strings.Repeat("t", 64)); n != "" {
		t.Fatalf("a 129-character name was accepted: %q", n)
	}
	if _, err := mcp.New(nil, mcp.Options{}); !errors.Is(err, mcp.ErrNoPrincipal) {
		t.Fatalf("New without a principal: %v", err)
	}
}

// The SDK's client in-process against a real daemon: tools with their
// declared schemas, results, typed errors, cancellation.
func TestToolsInProcess(t *testing.T) {
	d := startDaemon(t)
	s := connect(t, d, mcp.Options{Principal: "alice"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	lt, err := s.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*sdk.Tool{}
	for _, tl := range lt.Tools {
		byName[tl.Name] = tl
	}
	for _, want := range []string{"testcap__echo", "testcap__fail", "testcap__spawn_persistent", "list_processes", "read_process_output", "process_status", "stop_process"} {
		if byName[want] == nil {
			t.Fatalf("tools/list lacks %s (has %d tools)", want, len(lt.Tools))
		}
	}
	caps, err := d.Capsules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range caps[0].Tools {
		if tl.Name != "fail" {
			continue
		}
		got, _ := json.Marshal(byName["testcap__fail"].InputSchema)
		var a, b any
		_ = json.Unmarshal(got, &a)
		_ = json.Unmarshal(tl.InputSchema, &b)
		if ja, jb := mustJSON(a), mustJSON(b); ja != jb {
			t.Fatalf("schema of testcap__fail over MCP %s, declared %s", ja, jb)
		}
		if byName["testcap__fail"].Description != tl.Description {
			t.Fatalf("description %q, declared %q", byName["testcap__fail"].Description, tl.Description)
		}
	}

	var echoed map[string]any
	res := call(t, s, "testcap__echo", map[string]any{"a": []int{1, 2}})
	structured(t, res, &echoed)
	if mustJSON(echoed["a"]) != "[1,2]" || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, `"a"`) {
		t.Fatalf("echo: %+v / %v", echoed, res.Content)
	}
	if code := errCode(t, call(t, s, "testcap__fail", map[string]any{"message": "boom"})); code != api.CodeToolError {
		t.Fatalf("fail: code %q", code)
	}
	if code := errCode(t, call(t, s, "testcap__fail", map[string]any{"message": 5})); code != api.CodeInvalidRequest {
		t.Fatalf("schema-breaking arguments: code %q", code)
	}
	if code := errCode(t, call(t, s, "process_status", map[string]any{"id": "nope"})); code != api.CodeInvalidRequest {
		t.Fatalf("an ID shorter than the shortest prefix (8): code %q", code)
	}
	if code := errCode(t, call(t, s, "process_status", map[string]any{"id": "aaaaaaaaaaaa"})); code != api.CodeNoSuchProcess {
		t.Fatalf("unknown process: code %q", code)
	}
	if code := errCode(t, call(t, s, "read_process_output", map[string]any{"id": "x", "bogus": 1})); code != api.CodeInvalidRequest {
		t.Fatalf("unknown argument: code %q", code)
	}
	if _, err := s.cs.CallTool(ctx, &sdk.CallToolParams{Name: "nope__tool", Arguments: map[string]any{}}); err == nil {
		t.Fatal("an unknown tool was answered")
	}

	// Cancellation: a call waiting on a live process is cancelled by the
	// client; the session goes on answering.
	id := spawnReader(t, s)
	cctx, ccancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := s.cs.CallTool(cctx, &sdk.CallToolParams{Name: "testcap__wait", Arguments: map[string]any{"id": id, "timeout_ms": 25000}})
		errc <- err
	}()
	time.AfterFunc(300*time.Millisecond, ccancel)
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled call did not return within 20s")
	}
	ccancel()
	var st struct{ Phase string }
	structured(t, call(t, s, "process_status", map[string]any{"id": id}), &st)
	if st.Phase != "running" {
		t.Fatalf("after the cancelled wait: phase %q", st.Phase)
	}
	structured(t, call(t, s, "stop_process", map[string]any{"id": id, "grace_ms": 0}), &map[string]any{})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Processes as resources: listed per principal, read from a cursor,
// subscribed to, updated on output and on exit; invisible to another
// principal, whose answers match an unknown URI's; subscriptions bounded.
func TestResourcesInProcess(t *testing.T) {
	// The writes below follow each Subscribe at once: a subscription must
	// see output written after its answer even when its watcher has not
	// started yet (it once took its tail in the watcher, and lost the
	// first update whenever the write won the race, every time with
	// keeper-held processes).
	d := startDaemon(t)
	alice := connect(t, d, mcp.Options{Principal: "alice", MaxSubscriptions: 2}, legacy)
	bob := connect(t, d, mcp.Options{Principal: "bob"}, legacy)
	// The same principal on the newest protocol (subscriptions/listen).
	alice2 := connect(t, d, mcp.Options{Principal: "alice"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	id := spawnReader(t, alice)
	stdout, status := mcp.ProcessURI(id, "stdout"), mcp.ProcessURI(id, "status")
	lr, err := alice.cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	uris := map[string]bool{}
	for _, r := range lr.Resources {
		uris[r.URI] = true
	}
	if !uris[stdout] || !uris[status] || !uris[mcp.ProcessURI(id, "stderr")] {
		t.Fatalf("resources/list: %v", uris)
	}
	if err := alice.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: stdout}); err != nil {
		t.Fatal(err)
	}
	if err := alice.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: status}); err != nil {
		t.Fatal(err)
	}
	subscribe(t, alice2, stdout)
	// Over the bound: a clear error with its code.
	err = alice.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: mcp.ProcessURI(id, "stderr")})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || !strings.Contains(string(je.Data), "too-many-subscriptions") {
		t.Fatalf("third subscription: %v", err)
	}

	structured(t, call(t, alice, "testcap__write_stdin", map[string]any{"id": id, "data": "hello\n"}), &map[string]any{})
	waitUpdate(t, alice, stdout)
	waitUpdate(t, alice2, stdout)
	rr, err := alice.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: stdout})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Contents) != 1 || rr.Contents[0].Text != "got hello\n" {
		t.Fatalf("read %s: %+v", stdout, rr.Contents[0])
	}
	next, _ := rr.Contents[0].Meta["next_uri"].(string)
	structured(t, call(t, alice, "testcap__write_stdin", map[string]any{"id": id, "data": "again\n"}), &map[string]any{})
	waitUpdate(t, alice, stdout)
	rr, err = alice.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: next})
	if err != nil || rr.Contents[0].Text != "got again\n" {
		t.Fatalf("read from the cursor %s: %v %+v", next, err, rr)
	}

	// Bob sees none of it, and learns nothing from trying.
	lr, err = bob.cs.ListResources(ctx, nil)
	if err != nil || len(lr.Resources) != 0 {
		t.Fatalf("bob's resources/list: %v %+v", err, lr)
	}
	unknown := mcp.ProcessURI("no-such-id", "stdout")
	for _, op := range []func(string) error{
		func(u string) error { _, err := bob.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: u}); return err },
		func(u string) error { return bob.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: u}) },
	} {
		errTheirs, errUnknown := op(stdout), op(unknown)
		var a, b *jsonrpc.Error
		if !errors.As(errTheirs, &a) || !errors.As(errUnknown, &b) || a.Code != b.Code || a.Message != b.Message {
			t.Fatalf("another principal's URI: %v; an unknown one: %v", errTheirs, errUnknown)
		}
	}
	if code := errCode(t, call(t, bob, "stop_process", map[string]any{"id": id})); code != api.CodeNoSuchProcess {
		t.Fatalf("bob stopping alice's process: %q", code)
	}

	// The exit reaches the status subscription.
	structured(t, call(t, alice, "stop_process", map[string]any{"id": id}), &map[string]any{})
	waitUpdate(t, alice, status)
	rr, err = alice.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: status})
	if err != nil || !strings.Contains(rr.Contents[0].Text, `"phase":"exited"`) {
		t.Fatalf("status after stop: %v %+v", err, rr)
	}
}

// A thousand subscribe requests from one client, each for a different
// URI: the session holds at most DefaultMaxSubscriptions, and every request
// past the bound gets the same clear error whatever its URI (a process of
// the session's principal, another principal's, an unknown one: the bound
// is checked first, so it tells nothing of the URI), and the session keeps
// working. An unsubscribe makes room; below the bound an unknown URI is
// not found, as always.
func TestSubscriptionBound(t *testing.T) {
	d := startDaemon(t)
	s := connect(t, d, mcp.Options{Principal: "alice"}, legacy)
	bob := connect(t, d, mcp.Options{Principal: "bob"}, legacy)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	streams := []string{"status", "stdout", "stderr"}
	var uris []string
	for len(uris) <= mcp.DefaultMaxSubscriptions {
		id := spawnReader(t, s)
		for _, st := range streams {
			uris = append(uris, mcp.ProcessURI(id, st))
		}
	}
	own := len(uris)
	bid := spawnReader(t, bob)
	for _, st := range streams {
		uris = append(uris, mcp.ProcessURI(bid, st))
	}
	for i := 0; len(uris) < 1000; i++ {
		sum := sha256.Sum256([]byte(strconv.Itoa(i)))
		id := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))
		uris = append(uris, mcp.ProcessURI(id, streams[i%3]))
	}
	distinct := map[string]bool{}
	for _, u := range uris {
		distinct[u] = true
	}
	if len(distinct) != 1000 {
		t.Fatalf("%d distinct URIs", len(distinct))
	}
	accepted, refused := 0, 0
	for i, u := range uris {
		err := s.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: u})
		var je *jsonrpc.Error
		switch {
		case err == nil && i < own:
			accepted++
		case errors.As(err, &je) && strings.Contains(string(je.Data), "too-many-subscriptions") && strings.Contains(je.Message, "unsubscribe"):
			refused++
		default:
			t.Fatalf("subscription %d (%s): %v", i, u, err)
		}
	}
	if accepted != mcp.DefaultMaxSubscriptions || refused != 1000-mcp.DefaultMaxSubscriptions {
		t.Fatalf("%d subscriptions accepted, %d refused", accepted, refused)
	}
	if err := s.cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: uris[0]}); err != nil {
		t.Fatal(err)
	}
	var je *jsonrpc.Error
	if err := s.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uris[len(uris)-1]}); !errors.As(err, &je) || je.Code != sdk.CodeResourceNotFound {
		t.Fatalf("an unknown URI below the bound: %v", err)
	}
	if err := s.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uris[own-1]}); err != nil {
		t.Fatalf("after an unsubscribe: %v", err)
	}
	var pl struct{ Processes []any }
	structured(t, call(t, s, "list_processes", map[string]any{}), &pl)
	if len(pl.Processes) != own/3 {
		t.Fatalf("list_processes: %d processes", len(pl.Processes))
	}
}

// Two sessions of one server subscribed to one URI get one
// resources/updated each per change: the SDK's ResourceUpdated reaches
// every subscribed session, so one send per watcher gave each session one
// per subscribed session.
func TestTwoSessionsOneUpdate(t *testing.T) {
	d := startDaemon(t)
	srv, err := mcp.New(d, mcp.Options{Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := attach(t, srv, legacy), attach(t, srv, legacy)
	id := spawnReader(t, a)
	uri := mcp.ProcessURI(id, "stdout")
	subscribe(t, a, uri)
	subscribe(t, b, uri)
	call(t, a, "testcap__write_stdin", map[string]any{"id": id, "data": "x\n"})
	waitUpdate(t, a, uri)
	waitUpdate(t, b, uri)
	// One line, one change: past the 10 ms coalescing gap a second
	// notification would be a duplicate. Give one the time to come.
	time.Sleep(500 * time.Millisecond)
	for name, s := range map[string]*session{"a": a, "b": b} {
		if n := len(s.updated); n != 0 {
			t.Errorf("session %s got %d more resources/updated for one change", name, n)
		}
	}
	call(t, a, "stop_process", map[string]any{"id": id, "grace_ms": 0})
}

// A guest that traps (proc_exit) and one that outlives the host's call
// timeout: each call is isError with its typed reason in
// structuredContent.error.code and _meta, and the session goes on.
func TestTrapAndTimeoutInProcess(t *testing.T) {
	d, _ := startDaemonWith(t, func(c *config.Config) { c.CallTimeout = config.Duration(time.Second) })
	s := connect(t, d, mcp.Options{Principal: "alice"})
	for _, c := range []struct {
		tool string
		args map[string]any
		code string
		text string
	}{
		{"testcap__exit", map[string]any{"code": 3}, api.CodeTrap, "exited with code 3"},
		{"testcap__spin", map[string]any{"duration_ms": 30000}, api.CodeTimeout, ""},
	} {
		t0 := time.Now()
		res := call(t, s, c.tool, c.args)
		t.Logf("%s: %v", c.tool, time.Since(t0))
		text := res.Content[0].(*sdk.TextContent).Text
		if code := errCode(t, res); code != c.code || res.Meta["capsule-host/error-code"] != c.code ||
			!strings.HasPrefix(text, c.code+": ") || !strings.Contains(text, c.text) {
			t.Fatalf("%s: code %q, meta %v, text %q; want %s", c.tool, code, res.Meta, text, c.code)
		}
	}
	var echoed map[string]any
	structured(t, call(t, s, "testcap__echo", map[string]any{"after": "faults"}), &echoed)
	if echoed["after"] != "faults" {
		t.Fatalf("echo after the faults: %v", echoed)
	}
}

// The tool list follows the daemon's capsules. A reload that changes
// testcap reaches an in-process session as notifications/tools/list_changed
// without the client asking, through WatchToolChanges (the session with
// the daemon's own /mcp that a relaying `capsule-host mcp` holds); and,
// with no watcher, at the client's next tools/list, which re-syncs first.
func TestListChangedInProcess(t *testing.T) {
	dir := t.TempDir()
	testutil.CopyFiles(t, testcapDir(t), dir, "Capsule.toml", "testcap.wasm")
	d, sock := startDaemonWith(t, func(c *config.Config) { c.Capsules = []string{dir} })
	srv, err := mcp.New(d, mcp.Options{Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	s := attach(t, srv, legacy)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", sock)
	}}}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		srv.WatchToolChanges(wctx, hc, "http://capsule-host/mcp?principal=alice")
	}()
	defer func() { stopWatch(); <-watched }()

	version := "1.0.0"
	bump := func(to string) {
		t.Helper()
		m := filepath.Join(dir, "Capsule.toml")
		b, _ := os.ReadFile(m)
		b = bytes.Replace(b, []byte(`version = "`+version+`"`), []byte(`version = "`+to+`"`), 1)
		if err := os.WriteFile(m, b, 0o600); err != nil {
			t.Fatal(err)
		}
		version = to
		if res, err := d.Reload(ctx, ""); err != nil || len(res.Replaced) != 1 {
			t.Fatalf("reload: %+v %v", res, err)
		}
	}
	waitChanged := func(why string) {
		t.Helper()
		select {
		case <-s.changed:
		case <-time.After(20 * time.Second):
			t.Fatalf("no notifications/tools/list_changed within 20s of %s", why)
		}
	}
	if _, err := s.cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for len(s.changed) > 0 {
		<-s.changed
	}
	bump("1.0.1")
	waitChanged("a reload, with the watcher")

	stopWatch()
	<-watched
	for len(s.changed) > 0 {
		<-s.changed
	}
	bump("1.0.2")
	if _, err := s.cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitChanged("tools/list after a reload, with no watcher")
	lt, err := s.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		if tl.Name == "testcap__echo" && tl.Title == "testcap echo" {
			return
		}
	}
	t.Fatalf("testcap__echo is missing after the reloads: %d tools", len(lt.Tools))
}

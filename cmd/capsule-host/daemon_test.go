//go:build !leanclient

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// testDaemon is a daemon started in this test process on a temporary
// socket and state directory, serving the conformance capsule testcap.
type testDaemon struct {
	sock, tcp string
	cfg       *config.Config
	rt        *daemon.Runtime
	logs      *testutil.SyncBuffer
	done      chan error
	cancel    context.CancelFunc
}

func testcapDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.Abs("../../capsules/testcap")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "testcap.wasm")); err != nil {
		t.Fatalf("the conformance capsule is missing (%v): run capsules/build.sh", err)
	}
	return d
}

func startDaemon(t testing.TB, mutate func(*config.Config)) *testDaemon {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.SetStateDir(filepath.Join(dir, "state"))
	cfg.Socket = filepath.Join(dir, "d.sock")
	f := false
	cfg.Bundled = &f
	cfg.Capsules = []string{testcapDir(t)}
	// testcap asks for local, which is no longer enabled by default.
	cfg.Backends.Enabled = []string{"local"}
	cfg.ShutdownGrace = config.Duration(3 * time.Second)
	cfg.Processes.OnShutdown = config.OnShutdownStop // tests leave nothing running
	if mutate != nil {
		mutate(cfg)
	}
	return runDaemon(t, cfg)
}

// restart stops d as SIGTERM would and starts a new daemon on its config
// (the same socket, state directory and TCP address).
func (d *testDaemon) restart(t testing.TB) *testDaemon {
	t.Helper()
	d.stop(t)
	cfg := *d.cfg
	if d.tcp != "" {
		cfg.TCP.Listen = d.tcp
	}
	return runDaemon(t, &cfg)
}

// runDaemon serves cfg in this process until the test ends.
func runDaemon(t testing.TB, cfg *config.Config) *testDaemon {
	t.Helper()
	d := &testDaemon{sock: cfg.Socket, cfg: cfg, logs: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	lg := slog.New(daemon.NewRedactHandler(slog.NewTextHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	sock, err := daemon.ListenSocket(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	var tcp net.Listener
	if cfg.TCP.Listen != "" {
		tcp, err = net.Listen("tcp", cfg.TCP.Listen)
		if err != nil {
			t.Fatal(err)
		}
		d.tcp = tcp.Addr().String()
	}
	rt, err := daemon.Open(ctx, cfg, daemon.Options{Log: lg, Version: "test"})
	if err != nil {
		sock.Close()
		t.Fatal(err)
	}
	d.rt = rt
	go func() { d.done <- daemon.Serve(ctx, rt, sock, tcp, cfg.ShutdownGrace.D()) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop shuts the daemon down as SIGTERM would and checks the socket is gone.
func (d *testDaemon) stop(t testing.TB) {
	t.Helper()
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the daemon did not shut down within 60s")
	}
	if _, err := os.Stat(d.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket %s left behind (%v)", d.sock, err)
	}
}

func (d *testDaemon) cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runCLI(t, "", append(args, "--socket", d.sock)...)
}

// must is cli that fails the test unless the command exits 0; it returns
// stdout.
func (d *testDaemon) must(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := d.cli(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	return out
}

// spawnTicker starts a persistent ticking process as principal through
// testcap and returns its ID.
func (d *testDaemon) spawnTicker(t *testing.T, principal string) string {
	t.Helper()
	in := `{"request":{"cmd":"/bin/sh","args":["-c","i=0; while true; do i=$((i+1)); echo tick $i; echo err $i >&2; sleep 0.1; done"]},"options":{"label":"ticker"}}`
	out, errOut, code := d.cli(t, "call", "testcap", "spawn_persistent", in, "--principal", principal, "--json")
	if code != 0 {
		t.Fatalf("spawn: exit %d: %s", code, errOut)
	}
	var res api.CallResponse
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	var v struct {
		OK    string `json:"ok"`
		Error any    `json:"error"`
	}
	if err := json.Unmarshal(res.Output, &v); err != nil || v.OK == "" {
		t.Fatalf("spawn output %s (%v)", res.Output, err)
	}
	return v.OK
}

func TestClientCommandsAgainstDaemon(t *testing.T) {
	d := startDaemon(t, nil)

	out, errOut, code := d.cli(t, "capsules")
	if code != 0 || !strings.Contains(out, "testcap") || !strings.Contains(out, "spawn_persistent") {
		t.Fatalf("capsules: %d %q %q", code, out, errOut)
	}
	out, _, code = d.cli(t, "capsules", "--json")
	var cl api.CapsuleList
	if code != 0 || json.Unmarshal([]byte(out), &cl) != nil || len(cl.Capsules) != 1 {
		t.Fatalf("capsules --json: %d %q", code, out)
	}
	out, _, code = d.cli(t, "tools", "testcap")
	if code != 0 || !strings.Contains(out, "echo") || !strings.Contains(out, "TOOL") {
		t.Fatalf("tools: %d %q", code, out)
	}
	out, _, code = d.cli(t, "tools", "testcap", "--json")
	if code != 0 || !strings.Contains(out, `"input_schema"`) {
		t.Fatalf("tools --json: %d %q", code, out)
	}
	_, errOut, code = d.cli(t, "tools", "nope")
	if code != 1 || !strings.Contains(errOut, "no-such-capsule") {
		t.Fatalf("tools nope: %d %q", code, errOut)
	}

	// call: JSON output pretty-printed; stdin input; tool errors.
	out, _, code = d.cli(t, "call", "testcap", "echo", `{"a":[1,2]}`)
	if code != 0 || !strings.Contains(out, "\"a\": [") {
		t.Fatalf("call echo: %d %q", code, out)
	}
	out, _, code = runCLI(t, `{"from":"stdin"}`, "call", "testcap", "echo", "-", "--socket", d.sock)
	if code != 0 || !strings.Contains(out, `"from": "stdin"`) {
		t.Fatalf("call echo -: %d %q", code, out)
	}
	_, errOut, code = d.cli(t, "call", "testcap", "fail", `{"message":"boom"}`)
	if code != 1 || !strings.Contains(errOut, "tool-error") || !strings.Contains(errOut, "boom") {
		t.Fatalf("call fail: %d %q", code, errOut)
	}
	_, errOut, code = d.cli(t, "call", "testcap", "nope")
	if code != 1 || !strings.Contains(errOut, "no-such-tool") {
		t.Fatalf("call nope: %d %q", code, errOut)
	}
	_, errOut, code = d.cli(t, "call", "testcap", "echo", "--principal", "bad principal!")
	if code != 1 || !strings.Contains(errOut, "invalid-request") {
		t.Fatalf("bad principal: %d %q", code, errOut)
	}

	// A persistent process, seen through every operator command.
	id := d.spawnTicker(t, "alice")
	other := d.spawnTicker(t, "bob")
	out, _, code = d.cli(t, "ps")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, other) || !strings.Contains(out, "ticker") {
		t.Fatalf("ps: %d %q", code, out)
	}
	out, _, code = d.cli(t, "ps", "--principal", "alice")
	if code != 0 || !strings.Contains(out, id) || strings.Contains(out, other) {
		t.Fatalf("ps --principal: %d %q", code, out)
	}
	out, _, code = d.cli(t, "ps", "--capsule", "nope", "--json")
	if code != 0 || !strings.Contains(out, `"processes": []`) {
		t.Fatalf("ps --capsule nope: %d %q", code, out)
	}
	out, _, code = d.cli(t, "inspect", id)
	if code != 0 || !strings.Contains(out, "Principal:") || !strings.Contains(out, "alice") || !strings.Contains(out, "running") {
		t.Fatalf("inspect: %d %q", code, out)
	}
	_, errOut, code = d.cli(t, "inspect", strings.Repeat("a", 52))
	if code != 1 || !strings.Contains(errOut, "no-such-process") {
		t.Fatalf("inspect unknown: %d %q", code, errOut)
	}

	waitFor(t, func() bool {
		out, _, _ := d.cli(t, "logs", id)
		return strings.Contains(out, "tick 3")
	})
	out, _, code = d.cli(t, "logs", id, "--stderr")
	if code != 0 || !strings.Contains(out, "err 1") || strings.Contains(out, "tick") {
		t.Fatalf("logs --stderr: %d %q", code, out)
	}
	out, _, code = d.cli(t, "logs", id, "--json", "--max", "7")
	var ch api.LogChunk
	if code != 0 || json.Unmarshal([]byte(out), &ch) != nil || string(ch.Data) != "tick 1\n" || ch.Next == "" {
		t.Fatalf("logs --json --max 7: %d %q", code, out)
	}
	out, _, code = d.cli(t, "logs", id, "--cursor", ch.Next, "--max", "7")
	if code != 0 || out != "tick 2\n" {
		t.Fatalf("logs --cursor: %d %q", code, out)
	}
	_, errOut, code = d.cli(t, "logs", id, "--cursor", "garbage")
	if code != 1 || !strings.Contains(errOut, "no-such-process") {
		t.Fatalf("logs bad cursor: %d %q", code, errOut)
	}

	// stop: prints the exit; progress on stderr; logs -f then ends at EOF.
	out, errOut, code = d.cli(t, "stop", id, "--grace", "2s")
	if code != 0 || !strings.Contains(out, "stopped") || !strings.Contains(errOut, "stopping process") || !strings.Contains(errOut, d.rt.Registry.LogID(id)) {
		t.Fatalf("stop: %d %q %q", code, out, errOut)
	}
	out, errOut, code = d.cli(t, "logs", id, "-f")
	if code != 0 || !strings.Contains(out, "tick 1\n") || !strings.Contains(errOut, "following stdout") || !strings.Contains(errOut, "ended") {
		t.Fatalf("logs -f after stop: %d %q %q", code, out, errOut)
	}
	out, _, code = d.cli(t, "inspect", id, "--json")
	var p api.Process
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p.Phase != "exited" || p.Exit == nil || p.Reason != "stopped" {
		t.Fatalf("inspect after stop: %d %q", code, out)
	}

	// A guest that echoes an ID in its error text does not leak it either.
	_, errOut, code = d.cli(t, "call", "testcap", "fail", `{"message":"cannot use `+id+`"}`, "--principal", "alice")
	if code != 1 || !strings.Contains(errOut, id) {
		t.Fatalf("fail with id: %d %q", code, errOut)
	}
	if !strings.Contains(d.logs.String(), "cannot use proc:"+d.rt.Registry.LogID(id)) {
		t.Fatalf("the guest's error was not redacted to the log ID:\n%s", d.logs.String())
	}

	// Logs carry the ID's short hash, never the ID.
	logs := d.logs.String()
	if strings.Contains(logs, id) || strings.Contains(logs, other) {
		t.Fatalf("a raw process ID reached the daemon log:\n%s", logs)
	}
	if !strings.Contains(logs, "proc="+d.rt.Registry.LogID(id)) || !strings.Contains(logs, "principal=alice") {
		t.Fatalf("the stop log lacks capsule/principal/hash:\n%s", logs)
	}

	// Shutdown stops bob's still-running process and says so.
	d.stop(t)
	logs = d.logs.String()
	for _, want := range []string{"shutting down", "stopping persistent process for shutdown", "proc=" + d.rt.Registry.LogID(other), "persistent processes stopped", "capsule-host stopped"} {
		if !strings.Contains(logs, want) {
			t.Errorf("shutdown log lacks %q:\n%s", want, logs)
		}
	}
}

// logs -f streams new output as it arrives and ends when the process exits.
func TestLogsFollowStreams(t *testing.T) {
	d := startDaemon(t, nil)
	id := d.spawnTicker(t, "alice")
	done := d.cliAsync(t, "logs", id, "-f")
	time.Sleep(800 * time.Millisecond)
	if _, _, code := d.cli(t, "stop", id, "--grace", "1s"); code != 0 {
		t.Fatal("stop failed")
	}
	select {
	case r := <-done:
		if r.code != 0 || !strings.Contains(r.out, "tick 5\n") {
			t.Fatalf("follow: %d %q %q", r.code, r.out, r.errOut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("logs -f did not end after the process was stopped")
	}
}

func TestTCPListenerTokens(t *testing.T) {
	tokA, tokB := "token-for-alice-0123456789", "token-for-bob-0123456789"
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	d := startDaemon(t, func(c *config.Config) {
		c.TCP.Listen = "127.0.0.1:0"
		c.Principals = map[string]config.Principal{
			"alice": {TokenSHA256: []string{hash(tokA)}},
			"bob":   {TokenSHA256: []string{hash(tokB)}},
		}
	})
	ctx := context.Background()
	alice := api.NewTCP(d.tcp, tokA)
	bob := api.NewTCP(d.tcp, tokB)

	var ae *api.Error
	if _, err := api.NewTCP(d.tcp, "").Health(ctx); !errors.As(err, &ae) || ae.Code != api.CodeUnauthorized {
		t.Fatalf("no token: %v", err)
	}
	if _, err := api.NewTCP(d.tcp, "wrong").Health(ctx); !errors.As(err, &ae) || ae.Code != api.CodeUnauthorized {
		t.Fatalf("wrong token: %v", err)
	}
	h, err := alice.Health(ctx)
	if err != nil || h.Principal != "alice" || h.Runtime != nil {
		t.Fatalf("health over TCP: %+v %v; want alice's, without the operator's runtime figures", h, err)
	}
	if h, err := api.NewUnix(d.sock).Health(ctx); err != nil || h.Runtime == nil || h.Runtime.Goroutines <= 0 || h.Runtime.FDs <= 0 {
		t.Fatalf("health on the socket: %+v %v; want the runtime figures", h, err)
	}
	// A request can never name a principal its token does not map to.
	_, err = alice.Call(ctx, api.CallRequest{Capsule: "testcap", Tool: "echo", Principal: "bob"})
	if !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Fatalf("alice acting as bob: %v", err)
	}
	if _, err := alice.Processes(ctx, "", "bob"); !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Fatalf("alice listing bob: %v", err)
	}
	// The token's principal owns what it spawns.
	res, err := alice.Call(ctx, api.CallRequest{Capsule: "testcap", Tool: "spawn_persistent",
		Input: json.RawMessage(`{"request":{"cmd":"/bin/sleep","args":["30"]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ OK string }
	if json.Unmarshal(res.Output, &v) != nil || v.OK == "" {
		t.Fatalf("spawn: %s", res.Output)
	}
	ps, err := alice.Processes(ctx, "", "")
	if err != nil || len(ps) != 1 || ps[0].Principal != "alice" {
		t.Fatalf("alice ps: %+v %v", ps, err)
	}
	// Bob sees nothing of it, by any operator endpoint.
	if ps, err := bob.Processes(ctx, "", ""); err != nil || len(ps) != 0 {
		t.Fatalf("bob ps: %+v %v", ps, err)
	}
	for name, f := range map[string]func() error{
		"inspect": func() error { _, err := bob.Process(ctx, v.OK); return err },
		"logs":    func() error { _, err := bob.Logs(ctx, v.OK, api.LogQuery{}); return err },
		"stop":    func() error { _, err := bob.Stop(ctx, v.OK, nil); return err },
	} {
		if err := f(); !errors.As(err, &ae) || ae.Code != api.CodeNoSuchProcess {
			t.Fatalf("bob %s: %v", name, err)
		}
	}
	// The CLI over --tcp, with the token from the environment.
	t.Setenv("CAPSULE_HOST_TOKEN", tokB)
	out, errOut, code := runCLI(t, "", "ps", "--tcp", d.tcp)
	if code != 0 || strings.Contains(out, v.OK) {
		t.Fatalf("bob's ps over --tcp: %d %q %q", code, out, errOut)
	}
	_, errOut, code = runCLI(t, "", "call", "testcap", "echo", "--principal", "alice", "--tcp", d.tcp)
	if code != exitFailed || !strings.Contains(errOut, "forbidden") {
		t.Fatalf("bob calling as alice over --tcp: %d %q", code, errOut)
	}
	t.Setenv("CAPSULE_HOST_TOKEN", tokA)
	out, _, code = runCLI(t, "", "ps", "--tcp", d.tcp)
	if code != 0 || !strings.Contains(out, v.OK) {
		t.Fatalf("alice's ps over --tcp: %d %q", code, out)
	}

	// The socket is the operator: it sees and stops alice's process.
	if _, _, code := d.cli(t, "stop", v.OK, "--grace", "1s"); code != 0 {
		t.Fatal("operator stop failed")
	}
}

func TestServeRefusesSecondDaemonOnSameSocket(t *testing.T) {
	d := startDaemon(t, nil)
	_, errOut, code := runCLI(t, "", "serve", "--socket", d.sock, "--state-dir", t.TempDir())
	if code != exitFailed || !strings.Contains(errOut, "another capsule-host daemon") {
		t.Fatalf("%d %q", code, errOut)
	}
	st, err := os.Stat(d.sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", st, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 15s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// On shutdown, an in-flight call finishes within the grace period; one
// that outlives it is cancelled at the bound, and the daemon still exits.
func TestShutdownInFlightCalls(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		sleep  string
		wantOK bool
	}{
		{"finishes within grace", 5 * time.Second, "1", true},
		{"cancelled at the bound", 500 * time.Millisecond, "20", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemon(t, func(c *config.Config) { c.ShutdownGrace = config.Duration(tc.grace) })
			type res struct {
				out, errOut string
				code        int
			}
			done := make(chan res, 1)
			go func() {
				o, e, c := d.cli(t, "call", "testcap", "spawn", `{"cmd":"/bin/sleep","args":["`+tc.sleep+`"]}`, "--principal", "alice")
				done <- res{o, e, c}
			}()
			waitFor(t, func() bool { return strings.Contains(d.logs.String(), "process spawned") })
			start := time.Now()
			d.stop(t)
			took := time.Since(start)
			r := <-done
			if tc.wantOK && (r.code != 0 || !strings.Contains(r.out, "ok")) {
				t.Fatalf("in-flight call did not finish: %d %q %q", r.code, r.out, r.errOut)
			}
			if !tc.wantOK {
				if r.code == 0 && !strings.Contains(r.out, "cancel") {
					t.Fatalf("in-flight call outlived the grace and still succeeded: %q", r.out)
				}
				if took > 15*time.Second {
					t.Fatalf("shutdown took %v with a %v grace", took, tc.grace)
				}
				if !strings.Contains(d.logs.String(), "outlived the shutdown grace") {
					t.Errorf("the daemon did not say it cancelled calls:\n%s", d.logs.String())
				}
			}
		})
	}
}

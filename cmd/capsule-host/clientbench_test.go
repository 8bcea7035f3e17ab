//go:build !leanclient

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// BenchmarkClientVsTmux measures the CLI as a user runs it, whole process
// (fork, exec, start-up, one request, exit), against what the user would
// pick instead, interleaved in one run so that load hits both sides alike:
//
//	call shell spawn_background_process {"command":"true"}  vs  tmux new-session -d true
//	logs ID                                                   vs  tmux capture-pane -p
//	version (start-up only, no connection)                    vs  tmux -V
//
// call and logs run twice: the full binary, and the lean client build
// (-tags leanclient, lean.go) with the full one beside it as capsule-hostd.
// One iteration is 20 rounds of every side, so that -benchtime 2s (one
// or two iterations: a round takes about half a second) still gives
// medians of 20 or more.
//
// It builds the binaries as make client does (buildBinaries), starts
// `capsule-host serve` and a tmux server on private sockets, and reports
// each side's median and interquartile range in ms and the ratio of the
// medians (the goal: call/tmux-new < 1, logs/tmux-capture < 1). It also
// times the same call and read made by an in-process api.Client on the
// socket: that is the daemon's share, the rest is the client's start-up.
//
//	go test -run '^$' -bench ClientVsTmux -benchtime 200x ./cmd/capsule-host
func BenchmarkClientVsTmux(b *testing.B) {
	if _, err := exec.LookPath("tmux"); err != nil {
		b.Skip("SKIP: tmux is not installed, so the client cannot be compared with it (apt-get install tmux)")
	}
	r := newClientBench(b, true)
	sides := []testutil.Side{
		{Name: "lean-call", Run: r.lean("call", "shell", "spawn_background_process", `{"command":"true"}`, "--principal", "bench")},
		{Name: "lean-logs", Run: r.lean("logs", r.id)},
		{Name: "call", Run: r.ours("call", "shell", "spawn_background_process", `{"command":"true"}`, "--principal", "bench")},
		{Name: "tmux-new", Run: r.tmux("new-session", "-d", "true")},
		{Name: "logs", Run: r.ours("logs", r.id)},
		{Name: "tmux-capture", Run: r.tmux("capture-pane", "-p", "-t", "base")},
		{Name: "version", Run: r.ours("version")},
		{Name: "tmux-V", Run: r.tmux("-V")},
		{Name: "api-call", Run: r.apiCall},
		{Name: "api-logs", Run: r.apiLogs},
	}
	med := testutil.ReportSides(b, "ms", sides, testutil.Interleave(b, sides, 20))
	b.ReportMetric(med["call"]/med["tmux-new"], "call/tmux-new")
	b.ReportMetric(med["logs"]/med["tmux-capture"], "logs/tmux-capture")
	b.ReportMetric(med["version"]/med["tmux-V"], "version/tmux-V")
	b.ReportMetric(med["lean-call"]/med["tmux-new"], "lean-call/tmux-new")
	b.ReportMetric(med["lean-logs"]/med["tmux-capture"], "lean-logs/tmux-capture")
}

// clientBench is the built binary with its daemon and a tmux server.
type clientBench struct {
	b         testing.TB
	bin, sock string
	leanBin   string
	tmuxSock  string
	env       []string
	id        string // a process whose output logs reads
	c         *api.Client
	callReq   api.CallRequest
}

// newClientBench builds the binaries and starts their daemon (and, with
// withTmux, a tmux server).
func newClientBench(b testing.TB, withTmux bool) *clientBench {
	dir := b.TempDir()
	r := &clientBench{b: b, bin: filepath.Join(dir, "capsule-host"), sock: filepath.Join(dir, "d.sock"), tmuxSock: filepath.Join(dir, "tmux.sock")}
	r.leanBin = filepath.Join(dir, "lean", "capsule-host")
	buildBinaries(b, r.bin, r.leanBin)
	// Quotas high enough for every iteration's process; no user config.
	cfgPath := filepath.Join(dir, "host.toml")
	cfg := "[quotas]\nmax_concurrent = 64\nmax_retained = 100000\nmax_entries = 100000\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	r.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_RUNTIME_DIR=", "XDG_STATE_HOME=" + filepath.Join(dir, "xdg-state")}
	r.startDaemon(dir, cfgPath)
	if withTmux {
		r.startTmux()
	}
	r.c = api.NewUnix(r.sock)
	r.callReq = api.CallRequest{Capsule: "shell", Tool: "spawn_background_process", Input: json.RawMessage(`{"command":"true"}`), Principal: "bench"}
	res, err := r.c.Call(context.Background(), api.CallRequest{Capsule: "shell", Tool: "spawn_background_process",
		Input: json.RawMessage(`{"command":"echo hello from the bench; sleep 600"}`), Principal: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var out struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil || out.ID == "" {
		b.Fatalf("spawn answered %s (%v)", res.Output, err)
	}
	r.id = out.ID
	return r
}

func (r *clientBench) startDaemon(dir, cfgPath string) {
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		r.b.Fatal(err)
	}
	stopKeepersAtEnd(r.b, dir)
	srv := exec.Command(r.bin, "serve", "--socket", r.sock, "--state-dir", filepath.Join(dir, "state"), "--config", cfgPath, "--on-shutdown", "stop")
	srv.Env, srv.Stdout, srv.Stderr = r.env, logf, logf
	if err := srv.Start(); err != nil {
		r.b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait(); logf.Close() }()
	r.b.Cleanup(func() {
		_ = srv.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
	})
	// A fresh state directory compiles the bundled capsules first: at a
	// load of 30 on the 2-core machine that took more than a minute.
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if r.ours("capsules")() == nil {
			return
		}
		if time.Now().After(deadline) {
			r.b.Fatal("the daemon did not answer within 3 minutes")
		}
		select {
		case err := <-exited:
			r.b.Fatalf("the daemon exited early: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startTmux starts a private tmux server with one session whose pane
// capture-pane reads; Cleanup kills the server.
func (r *clientBench) startTmux() {
	if err := r.tmux("new-session", "-d", "-s", "base", "echo hello from the bench; sleep 600")(); err != nil {
		r.b.Fatal(err)
	}
	r.b.Cleanup(func() { _ = r.tmux("kill-server")() })
}

// ours runs the built binary once against the daemon.
func (r *clientBench) ours(args ...string) func() error {
	args = append(args, "--socket", r.sock)
	return func() error { return r.exec(r.bin, args...) }
}

// lean runs the lean client build once against the daemon.
func (r *clientBench) lean(args ...string) func() error {
	args = append(args, "--socket", r.sock)
	return func() error { return r.exec(r.leanBin, args...) }
}

// tmux runs the tmux client once against the private server.
func (r *clientBench) tmux(args ...string) func() error {
	args = append([]string{"-S", r.tmuxSock, "-f", "/dev/null"}, args...)
	return func() error { return r.exec("tmux", args...) }
}

func (r *clientBench) exec(bin string, args ...string) error {
	_, err := r.output(append([]string{bin}, args...))
	return err
}

// output runs argv once and returns its stdout.
func (r *clientBench) output(argv []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = r.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %w: %s", argv, err, errOut.Bytes())
	}
	return out.String(), nil
}

func (r *clientBench) apiCall() error {
	_, err := r.c.Call(context.Background(), r.callReq)
	return err
}

func (r *clientBench) apiLogs() error {
	_, err := r.c.Logs(context.Background(), r.id, api.LogQuery{})
	return err
}

// buildBinaries builds, as make client does, the full binary at full
// (cgo where there is a C compiler: its exec helper is the C constructor)
// and the lean client build (-tags leanclient, CGO_ENABLED=0: a static
// binary starts without the dynamic loader) at lean, with the full one
// beside it as capsule-hostd for the commands it hands on.
func buildBinaries(t testing.TB, full, lean string) {
	t.Helper()
	build := exec.Command("go", "build", "-tags", "leanclient", "-o", lean, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags leanclient: %v\n%s", err, out)
	}
	// The full binary is builtBinary's build: linked, not built again.
	for _, to := range []string{full, filepath.Join(filepath.Dir(lean), "capsule-hostd")} {
		if err := os.Link(builtBinary(t), to); err != nil {
			t.Fatalf("the full binary at %s: %v", to, err)
		}
	}
}

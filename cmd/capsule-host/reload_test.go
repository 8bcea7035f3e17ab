//go:build !leanclient

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// Reload: real capsules (testcap, testcap10, the bundled shell) copied to
// temporary directories, changed on disk, and reloaded through the CLI,
// the API and SIGHUP while their processes run.

// reloadDaemon is a testDaemon whose config's capsule list (what a reload
// re-reads) the test can change.
type reloadDaemon struct {
	*testDaemon
	// c is one API client for polling: each in-process CLI run keeps its
	// keep-alive connection open, and polling through the CLI would reach
	// the daemon's per-client connection cap.
	c       *api.Client
	mu      sync.Mutex
	dirs    []string
	bundled bool
}

func (d *reloadDaemon) setDirs(dirs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dirs = slices.Clone(dirs)
}

// startReloadDaemon is startDaemon with the bundled set (when bundled),
// the capsule directories dirs, a Reconfig that re-reads d.dirs, and
// hangup as the SIGHUP channel.
func startReloadDaemon(t *testing.T, dirs []string, bundled bool, hangup <-chan os.Signal, mods ...func(*daemon.Options)) *reloadDaemon {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.SetStateDir(filepath.Join(dir, "state"))
	cfg.Socket = filepath.Join(dir, "d.sock")
	cfg.Bundled = &bundled
	cfg.Capsules = slices.Clone(dirs)
	cfg.ShutdownGrace = config.Duration(3 * time.Second)
	cfg.Backends.Enabled = []string{"local", "bwrap"} // testcap is local, the shell capsule bwrap
	cfg.Processes.OnShutdown = config.OnShutdownStop  // tests leave nothing running
	rd := &reloadDaemon{dirs: slices.Clone(dirs), bundled: bundled}
	reconfig := func() (*config.Config, error) {
		rd.mu.Lock()
		defer rd.mu.Unlock()
		c := *cfg
		c.Capsules = slices.Clone(rd.dirs)
		return &c, nil
	}
	d := &testDaemon{sock: cfg.Socket, cfg: cfg, logs: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	lg := slog.New(daemon.NewRedactHandler(slog.NewTextHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	sock, err := daemon.ListenSocket(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	o := daemon.Options{Log: lg, Version: "test", Bundled: bundledFS, Reconfig: reconfig, Hangup: hangup}
	for _, mod := range mods {
		mod(&o)
	}
	rt, err := daemon.Open(ctx, cfg, o)
	if err != nil {
		sock.Close()
		cancel()
		t.Fatal(err)
	}
	d.rt = rt
	go func() { d.done <- daemon.Serve(ctx, rt, sock, nil, cfg.ShutdownGrace.D()) }()
	t.Cleanup(func() { d.stop(t) })
	rd.testDaemon = d
	rd.c = api.NewUnix(d.sock)
	return rd
}

// waitLong polls cond for up to 90s: a reload compiles and instantiates
// a capsule, which takes seconds under -race on a loaded machine.
func waitLong(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 90s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// capsuleCopy copies the capsule directory capsules/<name> to a new
// temporary directory.
func capsuleCopy(t *testing.T, name string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("../../capsules", name))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), name)
	copyDir(t, src, dst)
	return dst
}

var versionRE = regexp.MustCompile(`(?m)^version = "[^"]*"`)

// setVersion rewrites the manifest's capsule version: a changed manifest
// with the same module, so a reload replaces the capsule.
func setVersion(t *testing.T, dir, v string) {
	t.Helper()
	p := filepath.Join(dir, "Capsule.toml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	nb := versionRE.ReplaceAll(b, []byte(`version = "`+v+`"`))
	if string(nb) == string(b) && !strings.Contains(string(b), `version = "`+v+`"`) {
		t.Fatalf("no version line in %s", p)
	}
	if err := os.WriteFile(p, nb, 0o644); err != nil {
		t.Fatal(err)
	}
}

// capsuleList is `capsules --json`.
func (d *reloadDaemon) capsuleList(t *testing.T) api.CapsuleList {
	t.Helper()
	out, errOut, code := d.cli(t, "capsules", "--json")
	var l api.CapsuleList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
		t.Fatalf("capsules --json: %d %q %q", code, out, errOut)
	}
	return l
}

// version is the loaded version of a capsule ("" : none).
func (d *reloadDaemon) version(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	caps, err := d.c.Capsules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps {
		if c.Name == name {
			return c.Version
		}
	}
	return ""
}

// reload runs `reload [NAME] --json` and decodes the answer.
func (d *reloadDaemon) reload(t *testing.T, wantCode int, name ...string) api.ReloadResponse {
	t.Helper()
	out, errOut, code := d.cli(t, append(append([]string{"reload"}, name...), "--json")...)
	var r api.ReloadResponse
	if code != wantCode || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("reload %v: exit %d (want %d): %q %q", name, code, wantCode, out, errOut)
	}
	return r
}

// callOut calls a tool as principal and returns its JSON output.
func (d *reloadDaemon) callOut(t *testing.T, capsule, tool, principal string, in any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.c.Call(ctx, api.CallRequest{Capsule: capsule, Tool: tool, Input: b, Principal: principal})
	if err != nil {
		t.Fatalf("call %s %s: %v", capsule, tool, err)
	}
	m := map[string]any{}
	if json.Unmarshal(res.Output, &m) != nil {
		t.Fatalf("call %s %s: %s", capsule, tool, res.Output)
	}
	return m
}

func (d *reloadDaemon) phase(t *testing.T, id string) api.Process {
	t.Helper()
	out, errOut, code := d.cli(t, "inspect", id, "--json")
	var p api.Process
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil {
		t.Fatalf("inspect: %d %q %q", code, out, errOut)
	}
	return p
}

// A persistent process survives the reload of its capsule (a changed
// manifest; a config directory overriding the bundled shell) and stays
// reachable by its ID through the new version; an unchanged capsule is
// left alone; a capsule dropped from the config is removed and its
// processes are stopped with reason removed.
func TestReloadKeepsProcesses(t *testing.T) {
	tc := capsuleCopy(t, "testcap")
	d := startReloadDaemon(t, []string{tc}, true, nil)
	tick := d.spawnTicker(t, "alice")
	m := d.callOut(t, "shell", "spawn_background_process", "alice", map[string]any{"command": "i=0; while true; do i=$((i+1)); echo shell tick $i; sleep 0.1; done"})
	shellID := str(m, "id", "process_id")
	if len(shellID) != 52 {
		t.Fatalf("shell spawn: %v", m)
	}

	setVersion(t, tc, "1.0.1")
	shell := capsuleCopy(t, "shell")
	setVersion(t, shell, "9.9.9")
	d.setDirs(tc, shell)
	r := d.reload(t, 0)
	if !slices.Equal(r.Replaced, []string{"shell", "testcap"}) || len(r.Added)+len(r.Removed)+len(r.Failed) != 0 {
		t.Fatalf("reload: %+v", r)
	}
	if v := d.version(t, "testcap"); v != "1.0.1" {
		t.Fatalf("testcap version after reload: %q", v)
	}
	if v := d.version(t, "shell"); v != "9.9.9" {
		t.Fatalf("shell version after reload: %q", v)
	}
	// The same IDs, through the new versions, and still producing output.
	st := d.callOut(t, "testcap", "status", "alice", map[string]any{"id": tick})
	if b, _ := json.Marshal(st); !strings.Contains(string(b), "running") {
		t.Fatalf("status through the reloaded testcap: %s", b)
	}
	waitFor(t, func() bool {
		m := d.callOut(t, "shell", "read_process_logs", "alice", map[string]any{"id": shellID})
		return strings.Contains(str(m, "text", "data", "output", "stdout"), "shell tick 5")
	})
	if p := d.phase(t, tick); p.Phase != "running" {
		t.Fatalf("ticker after reload: %+v", p)
	}
	if !strings.Contains(d.logs.String(), "capsule replaced; its processes are kept") {
		t.Fatalf("the log does not say the capsule was replaced:\n%s", d.logs.String())
	}

	// Nothing changed: nothing is touched, also by name.
	if r := d.reload(t, 0); !slices.Equal(r.Unchanged, []string{"mcp-stdio", "shell", "testcap"}) || len(r.Replaced) != 0 {
		t.Fatalf("second reload: %+v", r)
	}
	if r := d.reload(t, 0, "testcap"); !slices.Equal(r.Unchanged, []string{"testcap"}) || len(r.Replaced) != 0 {
		t.Fatalf("reload testcap: %+v", r)
	}
	_, errOut, code := d.cli(t, "reload", "nope")
	if code != 1 || !strings.Contains(errOut, "no-such-capsule") {
		t.Fatalf("reload nope: %d %q", code, errOut)
	}

	// Drop the override: the bundled shell comes back, the process stays.
	d.setDirs(tc)
	if r := d.reload(t, 0); !slices.Equal(r.Replaced, []string{"shell"}) {
		t.Fatalf("reload back to the bundled shell: %+v", r)
	}
	if v := d.version(t, "shell"); v != "1.0.0" {
		t.Fatalf("bundled shell version: %q", v)
	}
	if p := d.phase(t, shellID); p.Phase != "running" {
		t.Fatalf("shell process after the override went: %+v", p)
	}

	// Drop testcap from the config: removed, its process stopped (the
	// OS process is gone) and forgotten (the registry's RemoveCapsule).
	p := d.phase(t, tick)
	if p.PID == nil {
		t.Fatalf("no PID for the ticker: %+v", p)
	}
	d.setDirs()
	r = d.reload(t, 0)
	if !slices.Equal(r.Removed, []string{"testcap"}) || r.ProcessesStopped != 1 {
		t.Fatalf("reload without testcap: %+v", r)
	}
	waitFor(t, func() bool { return syscall.Kill(int(*p.PID), 0) == syscall.ESRCH })
	if _, errOut, code := d.cli(t, "inspect", tick); code != 1 || !strings.Contains(errOut, "no-such-process") {
		t.Fatalf("inspect of the removed capsule's process: %d %q", code, errOut)
	}
	if !strings.Contains(d.logs.String(), "its persistent processes were stopped") {
		t.Fatalf("the log does not say the removal stopped processes:\n%s", d.logs.String())
	}
	_, errOut, code = d.cli(t, "call", "testcap", "echo")
	if code != 1 || !strings.Contains(errOut, "no-such-capsule") {
		t.Fatalf("call to the removed capsule: %d %q", code, errOut)
	}
	// And added again.
	d.setDirs(tc)
	if r := d.reload(t, 0); !slices.Equal(r.Added, []string{"testcap"}) {
		t.Fatalf("reload adding testcap: %+v", r)
	}
}

// failure returns the listed failure of dir, or fails.
func failure(t *testing.T, l api.CapsuleList, dir string) api.CapsuleFailure {
	t.Helper()
	for _, f := range l.Failed {
		if f.Dir == dir {
			return f
		}
	}
	t.Fatalf("no failure listed for %s: %+v", dir, l.Failed)
	return api.CapsuleFailure{}
}

// A broken manifest, a missing directory and a module that no longer
// matches its pin are each reported (reload output, `capsules`, the log)
// while the previous version and every other capsule keep serving; fixed,
// the failures clear.
func TestReloadReportsBrokenCapsules(t *testing.T) {
	tc, tc10 := capsuleCopy(t, "testcap"), capsuleCopy(t, "testcap10")
	d := startReloadDaemon(t, []string{tc, tc10}, false, nil)
	manifestFile := filepath.Join(tc10, "Capsule.toml")
	good, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifestFile, []byte("[capsule\nname = \"testcap10\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "not-there")
	d.setDirs(tc, tc10, missing)

	out, errOut, code := d.cli(t, "reload")
	if code != 1 || !strings.Contains(out, "failed") || !strings.Contains(out, "version 1.0.0 keeps serving") || !strings.Contains(errOut, "failed to load") {
		t.Fatalf("reload with a broken manifest: %d %q %q", code, out, errOut)
	}
	l := d.capsuleList(t)
	if f := failure(t, l, tc10); f.Name != "testcap10" || f.Kind != "manifest" || f.Serving != "1.0.0" || !strings.Contains(f.Error, "Capsule.toml") {
		t.Fatalf("broken manifest failure: %+v", f)
	}
	if f := failure(t, l, missing); f.Kind != "missing" || f.Name != "" || f.Serving != "" {
		t.Fatalf("missing dir failure: %+v", f)
	}
	if len(l.Capsules) != 2 {
		t.Fatalf("capsules served: %+v", l.Capsules)
	}
	out, _, code = d.cli(t, "capsules")
	if code != 0 || !strings.Contains(out, "FAILED") || !strings.Contains(out, missing) {
		t.Fatalf("capsules table: %d %q", code, out)
	}
	if !strings.Contains(d.logs.String(), "capsule failed to load; the daemon serves the others") {
		t.Fatalf("the failure is not in the log:\n%s", d.logs.String())
	}
	// Both keep serving: testcap10 its previous version.
	d.callOut(t, "testcap", "echo", "alice", map[string]any{"x": 1})
	if m := d.callOut(t, "testcap10", "v1_spawn", "alice", map[string]any{"cmd": "/bin/true"}); m["ok"] == nil {
		t.Fatalf("testcap10 v1_spawn: %v", m)
	}

	// Fixed manifest, no missing dir: the failures clear, and testcap10
	// (the same bytes as loaded) is unchanged.
	if err := os.WriteFile(manifestFile, good, 0o644); err != nil {
		t.Fatal(err)
	}
	d.setDirs(tc, tc10)
	if r := d.reload(t, 0); !slices.Equal(r.Unchanged, []string{"testcap", "testcap10"}) || len(r.Failed) != 0 {
		t.Fatalf("reload after the fix: %+v", r)
	}
	if l := d.capsuleList(t); len(l.Failed) != 0 {
		t.Fatalf("failures left after the fix: %+v", l.Failed)
	}

	// A module that no longer matches its pin: checksum, old one serves.
	wasm := filepath.Join(tc10, "testcap10.wasm")
	orig, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wasm, append(slices.Clone(orig), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	r := d.reload(t, 1, "testcap10")
	if len(r.Failed) != 1 || r.Failed[0].Kind != "checksum" || r.Failed[0].Serving != "1.0.0" {
		t.Fatalf("reload with a changed module: %+v", r)
	}
	if m := d.callOut(t, "testcap10", "v1_spawn", "alice", map[string]any{"cmd": "/bin/true"}); m["ok"] == nil {
		t.Fatalf("testcap10 after the failed reload: %v", m)
	}
}

// At start, a broken or missing capsule directory is reported and the
// others are served; when every configured capsule fails, Open refuses
// with all the errors.
func TestStartIsolatesCapsuleFailures(t *testing.T) {
	broken := capsuleCopy(t, "testcap10")
	if err := os.WriteFile(filepath.Join(broken, "Capsule.toml"), []byte("nonsense = \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "gone")
	d := startReloadDaemon(t, []string{testcapDir(t), broken, missing}, false, nil)
	l := d.capsuleList(t)
	if len(l.Capsules) != 1 || l.Capsules[0].Name != "testcap" || len(l.Failed) != 2 {
		t.Fatalf("capsules at start: %+v", l)
	}
	if f := failure(t, l, broken); f.Kind != "manifest" {
		t.Fatalf("broken: %+v", f)
	}
	if !strings.Contains(d.logs.String(), "dir="+missing) {
		t.Fatalf("the log does not name the missing directory:\n%s", d.logs.String())
	}
	if h, err := api.NewUnix(d.sock).Health(context.Background()); err != nil || h.CapsulesFailed != 2 || h.Capsules != 1 {
		t.Fatalf("health: %+v %v", h, err)
	}
	d.callOut(t, "testcap", "echo", "alice", map[string]any{})

	cfg := config.Default()
	cfg.SetStateDir(filepath.Join(t.TempDir(), "state"))
	cfg.Backends.Enabled = []string{"local"}
	off := false
	cfg.Bundled = &off
	cfg.Capsules = []string{broken, missing}
	_, err := daemon.Open(context.Background(), cfg, daemon.Options{Log: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, daemon.ErrNoCapsuleLoaded) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), broken) {
		t.Fatalf("Open with every capsule broken: %v", err)
	}
}

// SIGHUP reloads the capsules as `reload` does, keeping processes.
func TestSIGHUPReloads(t *testing.T) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tc := capsuleCopy(t, "testcap")
	d := startReloadDaemon(t, []string{tc}, false, hup)
	id := d.spawnTicker(t, "alice")
	setVersion(t, tc, "2.0.0")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLong(t, func() bool { return d.version(t, "testcap") == "2.0.0" })
	if !strings.Contains(d.logs.String(), "SIGHUP: reloading capsules") {
		t.Fatalf("no SIGHUP line in the log:\n%s", d.logs.String())
	}
	if p := d.phase(t, id); p.Phase != "running" {
		t.Fatalf("ticker after SIGHUP: %+v", p)
	}
	st := d.callOut(t, "testcap", "status", "alice", map[string]any{"id": id})
	if b, _ := json.Marshal(st); !strings.Contains(string(b), "running") {
		t.Fatalf("status after SIGHUP: %s", b)
	}
	d.stop(t) // while hup is still notified: no SIGHUP may reach a stopped daemon
}

// Reload is operator only: a TCP token (one principal) is refused.
func TestReloadRefusedOverTCP(t *testing.T) {
	tok := "token-for-alice-0123456789"
	d := startDaemon(t, func(c *config.Config) {
		c.TCP.Listen = "127.0.0.1:0"
		sum := sha256.Sum256([]byte(tok))
		c.Principals = map[string]config.Principal{"alice": {TokenSHA256: []string{hex.EncodeToString(sum[:])}}}
	})
	var ae *api.Error
	if _, err := api.NewTCP(d.tcp, tok).Reload(context.Background(), ""); !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Fatalf("reload over TCP: %v", err)
	}
}

// Calls in flight during reloads complete: callers hammer a capsule
// (quick calls, calls that run a process across the swap, status of a
// persistent process) while it is replaced again and again.
func TestReloadHammer(t *testing.T) {
	tc := capsuleCopy(t, "testcap")
	d := startReloadDaemon(t, []string{tc}, false, nil)
	id := d.spawnTicker(t, "alice")
	c := api.NewUnix(d.sock)
	calls := []api.CallRequest{
		{Capsule: "testcap", Tool: "echo", Input: json.RawMessage(`{"n":1}`), Principal: "alice"},
		{Capsule: "testcap", Tool: "spawn", Input: json.RawMessage(`{"cmd":"/bin/sleep","args":["0.3"]}`), Principal: "alice"},
		{Capsule: "testcap", Tool: "status", Input: json.RawMessage(`{"id":"` + id + `"}`), Principal: "alice"},
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	counts := make([]int, 6)
	for g := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := calls[g%len(calls)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.Call(ctx, req)
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				counts[g]++
				mu.Unlock()
			}
		}()
	}
	for i := range 5 {
		setVersion(t, tc, fmt.Sprintf("1.1.%d", i))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		r, err := c.Reload(ctx, "")
		cancel()
		if err != nil || !slices.Equal(r.Replaced, []string{"testcap"}) {
			t.Errorf("reload %d: %+v %v", i, r, err)
		}
	}
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("callers did not finish within 90s")
	}
	for _, err := range errs {
		t.Errorf("a call failed during reloads: %v", err)
	}
	for g, n := range counts {
		if n == 0 {
			t.Errorf("caller %d made no call", g)
		}
	}
	if p := d.phase(t, id); p.Phase != "running" {
		t.Fatalf("ticker after the hammer: %+v", p)
	}
}

// `serve` re-reads its config file on SIGHUP: a capsule directory added
// to the file is loaded; a config that no longer parses refuses the
// reload (config-error) and changes nothing.
func TestServeSIGHUPRereadsConfig(t *testing.T) {
	dir := t.TempDir()
	tc, tc10 := capsuleCopy(t, "testcap"), capsuleCopy(t, "testcap10")
	cfgFile := filepath.Join(dir, "capsule-host.toml")
	writeCfg := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(fmt.Sprintf("bundled = false\ncapsules = [%q]\n[backends]\nenabled = [\"local\"]\n[processes]\non_shutdown = \"stop\"\n", tc))
	sock := filepath.Join(dir, "d.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testutil.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--config", cfgFile, "--socket", sock, "--state-dir", filepath.Join(dir, "state")}, strings.NewReader(""), logs, logs)
	}()
	cli := func(args ...string) (string, string, int) { return runCLI(t, "", append(args, "--socket", sock)...) }
	poll := api.NewUnix(sock)
	// Open compiles testcap with a fresh cache: minutes under -race on a
	// loaded machine.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h, err := poll.Health(ctx)
		cancel()
		if err == nil && h.Ready { // health answers during the start too (status loading)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer within 3m: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	writeCfg(fmt.Sprintf("bundled = false\ncapsules = [%q, %q]\n", tc, tc10))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	loaded := func(name string) bool {
		caps, err := poll.Capsules(context.Background())
		return err == nil && slices.ContainsFunc(caps, func(c api.Capsule) bool { return c.Name == name })
	}
	deadline = time.Now().Add(90 * time.Second)
	for !loaded("testcap10") {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not load the added capsule within 90s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	writeCfg("bundled = \"maybe\"\n")
	_, errOut, code := cli("reload")
	if code != 1 || !strings.Contains(errOut, "config-error") {
		t.Fatalf("reload with a broken config: %d %q", code, errOut)
	}
	if out, _, _ := cli("capsules"); !strings.Contains(out, "testcap10") || !strings.Contains(out, "testcap ") {
		t.Fatalf("capsules after the refused reload: %q", out)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop within 60s")
	}
}

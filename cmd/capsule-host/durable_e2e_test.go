//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
	"github.com/capsule-host/capsule-host/internal/atomicfile"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// builtBinary builds the command once per test binary (as the README
// builds it: cgo where there is a C compiler, so the exec helper is the C
// constructor, sandbox/local/helper_cgo.go) into binDir, which TestMain
// removes at exit.
func builtBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "capsule-host")
		build := exec.Command("go", "build", "-o", binPath, ".")
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// skipSameBinary skips a test of the built binary in the -tags wasmtime
// leg: builtBinary is the same untagged build in both legs, so
// running it twice would test nothing new and double the CI time.
func skipSameBinary(t testing.TB) {
	if testing.Short() {
		t.Skip("SKIP: -short: builds the binary and runs real processes")
	}
	if taggedWasmtime {
		t.Skip("SKIP: -tags wasmtime: the built binary is the same untagged build the untagged leg tests")
	}
}

// daemonProc is one `capsule-host serve` of the built binary.
type daemonProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startServe(t testing.TB, bin, dir string, args ...string) *daemonProc {
	t.Helper()
	return startServeEnv(t, bin, dir, nil, args...)
}

// startServeEnv is startServe with extra environment variables (KEY=value).
func startServeEnv(t testing.TB, bin, dir string, env []string, args ...string) *daemonProc {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	stopKeepersAtEnd(t, dir)
	cmd := exec.Command(bin, append([]string{"serve", "--socket", filepath.Join(dir, "d.sock"), "--state-dir", filepath.Join(dir, "state"),
		"--config", filepath.Join(dir, "capsule-host.toml")}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_RUNTIME_DIR="}, env...)
	if c := os.Getenv(daemon.CacheEnv); c != "" {
		// TestMain's one compile cache: without it every daemon compiled
		// both bundled capsules afresh (≈ 20 s each on a loaded machine),
		// and a cluster test's second daemon missed awaitServing's 90 s.
		cmd.Env = append(cmd.Env, daemon.CacheEnv+"="+c)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, exited: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
	})
	return d
}

// awaitServing polls until the daemon's health says ready, bounded.
func awaitServing(t testing.TB, c *api.Client, d *daemonProc) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(90 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := c.Health(ctx)
		cancel()
		if err == nil && h.Ready { // health answers during the start too (status loading)
			return time.Since(start)
		}
		select {
		case <-d.exited:
			t.Fatalf("the daemon exited: %v", d.err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not serve within 90s: %v", err)
		}
	}
}

// shellCall calls a tool of the shell capsule; a tool error comes back
// as its code.
func shellCall(t testing.TB, c *api.Client, principal, tool string, in any) (map[string]any, string) {
	t.Helper()
	return capsuleCall(t, c, "shell", principal, tool, in)
}

// capsuleCall is shellCall for a capsule with the shell capsule's tools
// under another name.
func capsuleCall(t testing.TB, c *api.Client, capsule, principal, tool string, in any) (map[string]any, string) {
	t.Helper()
	b, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Call(ctx, api.CallRequest{Capsule: capsule, Tool: tool, Input: b, Principal: principal})
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeToolError && ae.ToolCode == api.CodeNoSuchProcess:
		return nil, api.CodeNoSuchProcess // the tool's typed code
	case errors.As(err, &ae) && ae.Code == "tool-error":
		return nil, ae.Code // another tool error (a quota, ...): the caller decides
	case err != nil:
		t.Fatalf("%s as %s: %v", tool, principal, err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(res.Output, &m); err != nil {
		t.Fatalf("%s: output %s", tool, res.Output)
	}
	if e, ok := m["error"].(map[string]any); ok {
		code, _ := e["code"].(string)
		return m, code
	}
	return m, ""
}

// counterLines checks that text is "MARK 1\nMARK 2\n..." with no gap
// and no repeat from first on, and returns the last number.
func counterLines(t testing.TB, what, mark, text string, first int) int {
	t.Helper()
	want := first
	for _, ln := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if ln == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(ln, mark+" "))
		if err != nil || n != want {
			t.Fatalf("%s: line %q, want %s %d (a gap or a duplicate)", what, ln, mark, want)
		}
		want++
	}
	return want - 1
}

// readAllLogs reads a process's stdout from the start to its current end.
func readAllLogs(t testing.TB, c *api.Client, principal, id string) string {
	t.Helper()
	return readAllLogsOf(t, c, "shell", principal, id)
}

func readAllLogsOf(t testing.TB, c *api.Client, capsule, principal, id string) string {
	t.Helper()
	var sb strings.Builder
	cursor := ""
	for i := 0; i < 1000; i++ {
		in := map[string]any{"id": id, "stream": "stdout", "max_bytes": 1 << 20}
		if cursor != "" {
			in["cursor"] = cursor
		}
		m, code := capsuleCall(t, c, capsule, principal, "read_process_logs", in)
		if code != "" {
			t.Fatalf("read %s: %s", id, code)
		}
		s, _ := m["stdout"].(string)
		sb.WriteString(s)
		cursor, _ = m["cursor"].(string)
		// A read shorter than max_bytes reached the end as it was then: a
		// process printing every 50 ms would otherwise never give an
		// empty read when a call takes longer than that (a loaded machine).
		if len(s) < 1<<20-4 {
			return sb.String()
		}
	}
	t.Fatalf("read %s: no end after 1000 reads", id)
	return ""
}

// restartHow is one way the first daemon ends and the second begins.
type restartHow struct {
	name string
	mix  map[string]int // persistent processes per backend
	// unit runs both serves in a stand-in for a systemd service's cgroup
	// (unitCgroup) and ends the first with the unit's stop; end is the
	// fallback where the test cannot make one.
	unit bool
	// end ends the first daemon; it returns the binary of the second.
	end func(t *testing.T, d *daemonProc) string
}

// TestDurableRestart is the crash and graceful-keep tests on the
// built binary. One daemon holds local, bwrap and OCI processes (a
// fleet: counters printing every 50 ms, a cat per backend, and exiters),
// over 4 principals; then the first serve ends (kill -9 with 100
// processes: 80 local, 15 bwrap, 5 OCI; `systemctl stop` of a service
// with the default KillMode=control-group, as root: serve runs in a
// stand-in for the unit's cgroup and gets SIGTERM with the default keep
// policy, while every other process in that cgroup gets SIGTERM and then
// SIGKILL; SIGTERM and an upgrade: the first serve is a rebuilt binary
// with another version stamp, deleted after it ends, and the test's own
// build takes over), 5 s pass with no daemon, and a new serve starts on
// the same state. Of every backend's processes: all are re-adopted
// (counted), every stream is gapless from its first byte and kept
// counting, a cursor from before continues exactly, stdin works, the
// exiters (which exit while no daemon runs) report their exit code and
// their exited events follow an event cursor from before, and another
// principal gets no-such-process for every ID. The keepers sit outside
// the daemon's cgroup. Without root, runc or busybox the OCI share runs
// on local (logged).
func TestDurableRestart(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	sigterm := func(t *testing.T, d *daemonProc) {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(90 * time.Second):
			t.Fatal("serve did not exit within 90 s of SIGTERM")
		}
		if d.err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", d.err)
		}
	}
	small := map[string]int{"local": 8, "bwrap": 10, "oci": 2}
	for _, how := range []restartHow{
		{name: "kill-9", mix: map[string]int{"local": 80, "bwrap": 15, "oci": 5}, end: func(t *testing.T, d *daemonProc) string {
			d.cmd.Process.Signal(syscall.SIGKILL)
			<-d.exited
			return bin
		}},
		{name: "systemctl-stop", mix: small, unit: true, end: func(t *testing.T, d *daemonProc) string { sigterm(t, d); return bin }},
		{name: "upgrade", mix: small, end: func(t *testing.T, d *daemonProc) string {
			sigterm(t, d)
			// The old release is gone, as after a package upgrade: the
			// keeper it started runs a deleted executable.
			if err := os.Remove(d.cmd.Path); err != nil {
				t.Fatal(err)
			}
			return bin
		}},
	} {
		t.Run(how.name, func(t *testing.T) { testRestart(t, bin, how) })
	}
}

func testRestart(t *testing.T, bin string, how restartHow) {
	dir := t.TempDir()
	first := bin
	if how.name == "upgrade" {
		first = filepath.Join(dir, "capsule-host-old")
		buildRelease(t, first, "v1.0.0-previous-release")
	}
	mix := fleetConfig(t, dir, how.mix)
	mark := fmt.Sprintf("durable-%d", time.Now().UnixNano())
	var unit *unitCgroup
	if how.unit {
		unit = newUnitCgroup(t)
	}
	inUnit := func(bin string) string {
		if unit == nil {
			return bin
		}
		return unit.wrap(t, dir, bin)
	}
	d1 := startServe(t, inUnit(first), dir)
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(t, c, d1)
	t.Cleanup(func() { stopMarked(t, mark) })
	ps := spawnFleet(t, c, mix, mark)
	cursors := fleetCursors(t, c, ps, mark)
	events := eventCursors(t, c, ps)

	second := bin
	if unit != nil {
		unit.stop(t, d1)
	} else {
		second = how.end(t, d1)
	}
	raiseFlag(t, dir, "exit-now") // the exiters end while no daemon runs
	time.Sleep(5 * time.Second)   // the downtime: the counters must keep counting

	d2 := startServe(t, inUnit(second), dir, "--on-shutdown", "stop")
	took := awaitServing(t, c, d2)
	t.Logf("restart: exec of serve to first answered call %v", took)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", readDaemonLog(t, dir))
		}
	})
	checkAdoptedAll(t, c, dir, ps)
	checkKeepersOwnCgroups(t, dir, d2)
	for _, fc := range cursors { // each continues exactly where it stopped
		m, code := capsuleCall(t, c, fc.p.capsule, fc.p.principal, "read_process_logs", map[string]any{"id": fc.p.id, "stream": "stdout", "cursor": fc.cursor})
		if code != "" {
			t.Fatalf("%v: read from the pre-restart cursor: %s", fc.p, code)
		}
		after, _ := m["stdout"].(string)
		counterLines(t, fmt.Sprintf("%v from the pre-restart cursor", fc.p), mark, after, fc.last+1)
	}
	checkFleetStreams(t, c, ps, mark)
	checkExitedEvents(t, c, ps, events)
	checkFleetStdin(t, c, ps)
	endServe(t, d2)
	waitNoMarked(t, mark, 30*time.Second)
}

// checkFleetStreams: every stream is gapless from its first byte, a
// counter kept counting while no daemon ran, an exiter reports its exit
// code to its owner, and another principal gets no-such-process.
func checkFleetStreams(t *testing.T, c *api.Client, ps []*fleetProc, mark string) {
	t.Helper()
	for i, p := range ps {
		what := fmt.Sprintf("process %d, %v", i, p)
		switch p.role {
		case "counter":
			last := counterLines(t, what, mark, readAllLogsOf(t, c, p.capsule, p.principal, p.id), 1)
			if last < 60 { // 5 s of downtime alone is 100 ticks of 50 ms
				t.Errorf("%s counted to %d: it did not keep running through the downtime", what, last)
			}
		case "exiter":
			counterLines(t, what, mark, readAllOperator(t, c, p.id), 1)
			m, code := capsuleCall(t, c, p.capsule, p.principal, "status", map[string]any{"id": p.id})
			st, _ := m["ok"].(map[string]any)
			ex, _ := st["exit"].(map[string]any)
			if code != "" || st["phase"] != "exited" || ex["exit_code"] != float64(7) || st["exit_reason"] != "self-exit" {
				t.Errorf("%s exited while no daemon ran: %q %v, want exit code 7, self-exit", what, code, m)
			}
		}
		other := fmt.Sprintf("p%d", (i+1)%4)
		tool := "read_process_logs"
		if p.role == "exiter" {
			tool = "status"
		}
		if _, code := capsuleCall(t, c, p.capsule, other, tool, map[string]any{"id": p.id}); code != api.CodeNoSuchProcess {
			t.Errorf("%s reading %s: %q, want no-such-process", other, what, code)
		}
	}
}

// checkFleetStdin writes to each backend's cat, kept from before the
// restart, and reads the echo.
func checkFleetStdin(t *testing.T, c *api.Client, ps []*fleetProc) {
	t.Helper()
	for _, p := range ps {
		if p.role != "cat" {
			continue
		}
		if _, code := capsuleCall(t, c, p.capsule, p.principal, "write_process_stdin", map[string]any{"id": p.id, "data": "after the restart\n"}); code != "" {
			t.Fatalf("%v: write stdin after the restart: %s", p, code)
		}
		for end := time.Now().Add(20 * time.Second); !strings.Contains(readAllLogsOf(t, c, p.capsule, p.principal, p.id), "after the restart"); {
			if time.Now().After(end) {
				t.Fatalf("%v: the pre-restart cat did not echo what was written after the restart", p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// readAllOperator reads a process's stdout from the start to its current
// end through the operator's API.
func readAllOperator(t testing.TB, c *api.Client, id string) string {
	t.Helper()
	var sb strings.Builder
	cursor := ""
	for range 1000 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ch, err := c.Logs(ctx, id, api.LogQuery{Cursor: cursor, Max: 1 << 20})
		cancel()
		if err != nil {
			t.Fatalf("logs of %s: %v", id, err)
		}
		if ch.BytesDropped != 0 {
			t.Fatalf("logs of %s: %d bytes dropped", id, ch.BytesDropped)
		}
		sb.Write(ch.Data)
		cursor = ch.Next
		if ch.EOF || len(ch.Data) < 1<<20-4 {
			return sb.String()
		}
	}
	t.Fatalf("logs of %s: no end after 1000 reads", id)
	return ""
}

// endServe stops a serve started with --on-shutdown stop.
func endServe(t testing.TB, d *daemonProc) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(90 * time.Second):
		t.Fatal("serve did not stop within 90 s of SIGTERM")
	}
}

// buildRelease builds the command into out as another release ships it:
// the same source with its own version stamp, so out is a rebuilt binary
// whose bytes and reported version differ from builtBinary's.
func buildRelease(t testing.TB, out, stamp string) {
	t.Helper()
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+stamp, "-o", out, ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", stamp, err, b)
	}
	for bin, want := range map[string]bool{out: true, builtBinary(t): false} {
		b, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil || strings.Contains(string(b), stamp) != want {
			t.Fatalf("%s version: %q %v; want the stamp %q: %v", bin, b, err, stamp, want)
		}
	}
}

// writeExecutable writes a program or script the test runs next. The
// tests of this package run in parallel and fork all the time: a plain
// os.WriteFile can leave its write descriptor in a child forked
// meanwhile, and the exec fails with "text file busy" (a CI run did).
func writeExecutable(path string, b []byte) error {
	return atomicfile.Write(path, b, 0o755, atomicfile.Options{NoSync: true, Exec: true})
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o700); err != nil {
		t.Fatal(err)
	}
}

// TestKeeperKilled: what RFC §16 says a keeper crash costs. kill -9 of
// the keeper while serve runs: its processes are ended (the next keeper,
// started by the daemon, kills what is left), each reads as exited with
// reason removed (1.1.0's mapping of keeper-lost), and new spawns work.
// A second serve on the same state directory is refused, naming the
// holder.
func TestKeeperKilled(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), nil, 0o600)
	mark := fmt.Sprintf("keeperkill-%d", time.Now().UnixNano())
	d := startServe(t, bin, dir, "--on-shutdown", "stop")
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(t, c, d)
	t.Cleanup(func() { stopMarked(t, mark) })

	// A second daemon on the same state is refused with the holder's PID.
	other := exec.Command(bin, "serve", "--socket", filepath.Join(dir, "other.sock"), "--state-dir", filepath.Join(dir, "state"), "--config", filepath.Join(dir, "capsule-host.toml"))
	out, err := other.CombinedOutput()
	if err == nil || !strings.Contains(string(out), strconv.Itoa(d.cmd.Process.Pid)) {
		t.Fatalf("a second serve on the same state: %v, output %q; want a refusal naming pid %d", err, out, d.cmd.Process.Pid)
	}

	var ids []string
	for i := 0; i < 4; i++ {
		m, code := shellCall(t, c, "alice", "spawn_background_process", map[string]any{"command": fmt.Sprintf(`while true; do echo %s; sleep 0.2; done`, mark)})
		if code != "" {
			t.Fatalf("spawn: %s", code)
		}
		id, _ := m["id"].(string)
		ids = append(ids, id)
	}
	b, err := os.ReadFile(keeperLock(dir))
	if err != nil {
		t.Fatal(err)
	}
	kpid, _ := strconv.Atoi(strings.Fields(string(b))[0])
	if kpid <= 1 {
		t.Fatalf("keeper pid %q", b)
	}
	syscall.Kill(kpid, syscall.SIGKILL)
	for _, id := range ids {
		st := processExit(t, c, "alice", id)
		if st == "still running" || st == "7" {
			t.Fatalf("process after its keeper died: %q", st)
		}
		m, _ := shellCall(t, c, "alice", "list_processes", map[string]any{})
		for _, p := range m["processes"].([]any) {
			pm := p.(map[string]any)
			if pm["id"] == id {
				if e, _ := pm["exit"].(map[string]any); e["reason"] != "removed" {
					t.Errorf("keeper-lost process: exit %v, want reason removed", e)
				}
			}
		}
	}
	waitNoMarked(t, mark, 30*time.Second)
	m, code := shellCall(t, c, "alice", "run_shell_command", map[string]any{"command": "echo " + mark + "-again"})
	if code != "" {
		t.Fatalf("run after the keeper died: %s %v", code, m)
	}
	m, code = shellCall(t, c, "alice", "spawn_background_process", map[string]any{"command": "echo " + mark + "-new-keeper"})
	if code != "" {
		t.Fatalf("spawn after the keeper died (a new keeper must start): %s", code)
	}
	id, _ := m["id"].(string)
	if st := processExit(t, c, "alice", id); st != "0" {
		t.Fatalf("process of the new keeper: exit %q, want 0", st)
	}
	endServe(t, d)
	waitNoMarked(t, mark, 30*time.Second)
}

// processExit is the exit code (or "signal N") list_processes reports.
func processExit(t testing.TB, c *api.Client, principal, id string) string {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		m, code := shellCall(t, c, principal, "list_processes", map[string]any{})
		if code != "" {
			t.Fatalf("list: %s", code)
		}
		ps, _ := m["processes"].([]any)
		for _, p := range ps {
			pm, _ := p.(map[string]any)
			if pm["id"] != id {
				continue
			}
			if e, ok := pm["exit"].(map[string]any); ok {
				if c, ok := e["exit_code"].(float64); ok {
					return strconv.Itoa(int(c))
				}
				if s, ok := e["signal"].(float64); ok {
					return fmt.Sprintf("signal %d", int(s))
				}
				return "unknown"
			}
		}
	}
	return "still running"
}

// waitNoMarked polls until no process runs the test's scripts.
func waitNoMarked(t testing.TB, mark string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		left := withMarker(mark)
		if len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("processes of the test outlived the daemon's stop: %v", left)
		}
	}
}

// stopMarked kills whatever of the test is left (a failed run), so no
// process outlives the test.
func stopMarked(t testing.TB, mark string) {
	for _, s := range withMarker(mark) {
		if pid, err := strconv.Atoi(strings.Fields(s)[0]); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestCrashPoints kills serve at every step of a persistent spawn, first
// exactly (the registry's crash-point hook names each step in turn: the
// spawn's own call makes serve kill itself there), then at random moments
// while spawns and kills run. It restarts serve on the same state each
// time and checks after each restart: every live process is one the
// registry lists as running and vice versa (no orphan, no dangling
// entry), the concurrency quota is exact (a principal can start exactly
// max_concurrent minus its running processes), and a spawn cut off before
// its journal record left nothing while one cut off after it is running.
func TestCrashPoints(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	const maxConc, rounds = 6, 8
	bin := builtBinary(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(fmt.Sprintf("[quotas]\nmax_concurrent = %d\nmax_retained = 256\nmax_entries = 1024\n", maxConc)), 0o600)
	mark := fmt.Sprintf("crashpt-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	principals := []string{"p0", "p1", "p2"}
	cmd := map[string]any{"command": "sleep 1000 # " + mark}
	exactCrashPoints(t, bin, dir, c, principals, mark, maxConc)
	for round := 0; round < rounds; round++ {
		d := startServe(t, bin, dir)
		awaitServing(t, c, d)
		checkCrashInvariants(t, c, fmt.Sprint("round ", round), principals, mark, maxConc)
		// Churn: spawns and kills from two goroutines, then kill -9 at a
		// random moment (20–400 ms in).
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					p := principals[(i+w)%len(principals)]
					b, _ := json.Marshal(cmd)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					res, err := c.Call(ctx, api.CallRequest{Capsule: "shell", Tool: "spawn_background_process", Input: b, Principal: p})
					cancel()
					if err == nil && i%3 == 0 {
						var m map[string]any
						if json.Unmarshal(res.Output, &m) == nil && m["id"] != nil {
							kb, _ := json.Marshal(map[string]any{"id": m["id"], "grace_ms": 0})
							ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
							c.Call(ctx, api.CallRequest{Capsule: "shell", Tool: "kill_process", Input: kb, Principal: p})
							cancel()
						}
					}
				}
			}()
		}
		time.Sleep(time.Duration(20+(round*53)%380) * time.Millisecond) // the kill moment, varied per round
		d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.exited
		close(stop)
		wg.Wait()
	}
	d := startServe(t, bin, dir, "--on-shutdown", "stop")
	awaitServing(t, c, d)
	checkCrashInvariants(t, c, fmt.Sprint("round ", rounds), principals, mark, maxConc)
	if b, err := os.ReadFile(filepath.Join(dir, "daemon.log")); err == nil {
		orphans := 0
		for _, m := range regexp.MustCompile(`orphans_terminated=(\d+)`).FindAllSubmatch(b, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			orphans += n
		}
		t.Logf("%d rounds: %d unjournaled processes (spawns cut off before their record) terminated by Adopt", rounds, orphans)
	}
	endServe(t, d)
	waitNoMarked(t, mark, 30*time.Second)
}

// exactCrashPoints is TestCrashPoints' first part: for each step of a
// spawn that registry.CrashPoints names, serve runs with the hook set to
// that step, one spawn makes it kill itself there (its exit must be that
// SIGKILL: the step was reached), and a plain serve then checks the
// invariants and that the cut-off spawn's process runs exactly when the
// step comes after its journal record.
func exactCrashPoints(t *testing.T, bin, dir string, c *api.Client, principals []string, mark string, maxConc int) {
	t.Helper()
	journaled := false
	for _, step := range registry.CrashPoints() {
		d := startServe(t, bin, dir)
		awaitServing(t, c, d)
		before := runningOf(t, c, "p0")
		d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.exited
		d = startServeEnv(t, bin, dir, []string{"CAPSULE_HOST_TEST_CRASH_POINTS=" + step})
		awaitServing(t, c, d)
		b, _ := json.Marshal(map[string]any{"command": "sleep 1000 # " + mark})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := c.Call(ctx, api.CallRequest{Capsule: "shell", Tool: "spawn_background_process", Input: b, Principal: "p0"})
		cancel()
		select {
		case <-d.exited:
		case <-time.After(20 * time.Second):
			t.Fatalf("step %s: serve still runs 20 s after the spawn (call: %v): the step was not reached", step, err)
		}
		var ee *exec.ExitError
		if !errors.As(d.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("step %s: serve ended with %v, want its own SIGKILL at the step", step, d.err)
		}
		journaled = journaled || step == "spawn-journaled"
		d = startServe(t, bin, dir)
		awaitServing(t, c, d)
		want := before
		if journaled {
			want++ // journaled before the crash: the restart adopted it
		}
		if got := runningOf(t, c, "p0"); got != want {
			t.Fatalf("step %s: p0 runs %d after the restart, want %d (%d before the cut-off spawn)", step, got, want, before)
		}
		checkCrashInvariants(t, c, "after step "+step, principals, mark, maxConc)
		d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.exited
	}
}

// runningOf counts principal's running processes as list_processes shows them.
func runningOf(t testing.TB, c *api.Client, principal string) int {
	t.Helper()
	m, code := shellCall(t, c, principal, "list_processes", map[string]any{})
	if code != "" {
		t.Fatalf("list_processes as %s: %s", principal, code)
	}
	n := 0
	for _, e := range m["processes"].([]any) {
		if e.(map[string]any)["running"] == true {
			n++
		}
	}
	return n
}

// checkCrashInvariants: live processes == listed running ones, and the
// concurrency quota of each principal is exact.
func checkCrashInvariants(t *testing.T, c *api.Client, round string, principals []string, mark string, maxConc int) {
	t.Helper()
	running := func() int {
		n := 0
		for _, p := range principals {
			m, code := shellCall(t, c, p, "list_processes", map[string]any{})
			if code != "" {
				t.Fatalf("%s: list as %s: %s", round, p, code)
			}
			for _, e := range m["processes"].([]any) {
				if e.(map[string]any)["running"] == true {
					n++
				}
			}
		}
		return n
	}
	var want, alive int
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		want, alive = running(), len(shells(withMarker(mark)))
		if want == alive || time.Now().After(end) {
			break
		}
	}
	if want != alive {
		t.Fatalf("%s: %d processes listed as running, %d alive: %v", round, want, alive, withMarker(mark))
	}
	for _, p := range principals {
		r := runningOf(t, c, p)
		started := 0
		for i := 0; i <= maxConc; i++ {
			_, code := shellCall(t, c, p, "spawn_background_process", map[string]any{"command": "sleep 1000 # " + mark})
			if code != "" {
				break
			}
			started++
		}
		if started != maxConc-r {
			t.Fatalf("%s: %s had %d running and could start %d more, want exactly %d (quota %d)", round, p, r, started, maxConc-r, maxConc)
		}
		// Free half the slots, so the next round's churn spawns again.
		m, _ := shellCall(t, c, p, "list_processes", map[string]any{})
		killed := 0
		for _, e := range m["processes"].([]any) {
			if em := e.(map[string]any); em["running"] == true && killed < maxConc/2 {
				if _, code := shellCall(t, c, p, "kill_process", map[string]any{"id": em["id"], "grace_ms": 0}); code != "" {
					t.Fatalf("%s: kill: %s", round, code)
				}
				killed++
			}
		}
	}
	t.Logf("%s: %d running before the top-up, all alive, quotas exact", round, want)
}

var keepersStopped sync.Map // dir → registered

// stopKeepersAtEnd registers, once per dir and before the daemon's own
// cleanup (so it runs after it), the shutdown of every keeper under dir's
// state with stop_all: with the keep policy a killed or failed test would
// otherwise leave keepers and their processes running on the machine.
func stopKeepersAtEnd(t testing.TB, dir string) {
	if _, dup := keepersStopped.LoadOrStore(dir, true); dup {
		return
	}
	t.Cleanup(func() {
		keepersStopped.Delete(dir)
		stopKeepers(t, dir, 60*time.Second)
	})
}

// stopKeepers asks every keeper under dir's state to stop all its
// processes and exit, waiting up to within for each.
func stopKeepers(t testing.TB, dir string, within time.Duration) {
	dirs, _ := filepath.Glob(filepath.Join(dir, "state", "keeper", "*"))
	for _, kd := range dirs {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		if c, err := keeper.Dial(ctx, kd); err == nil {
			if err := c.Shutdown(ctx, true); err != nil {
				t.Logf("keeper %s: stop_all at the end: %v", kd, err)
			}
			select {
			case <-c.Done():
			case <-ctx.Done():
			}
			c.Close()
		}
		cancel()
	}
}

// keeperLock is the lock file (holding the keeper's pid) of the one
// keeper under dir's state: the shell capsule's backend's.
func keeperLock(dir string) string {
	m, _ := filepath.Glob(filepath.Join(dir, "state", "keeper", "*", "keeper.lock"))
	if len(m) != 1 {
		return filepath.Join(dir, "state", "keeper", "(none or several)", "keeper.lock")
	}
	return m[0]
}

// raiseFlag creates name's base in every principal workspace under dir's
// state (the directories p0..p3), where the exiters look for it.
func raiseFlag(t testing.TB, dir, name string) {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(dir, "state"), func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && len(d.Name()) == 2 && d.Name()[0] == 'p' {
			if os.WriteFile(filepath.Join(path, filepath.Base(name)), nil, 0o644) == nil {
				n++
			}
		}
		return nil
	})
	if n == 0 {
		t.Fatal("no principal workspace found for the exit flag")
	}
}

// shells keeps the entries of withMarker that are the spawned shells
// themselves (a sandbox adds bwrap and setpriv processes whose argv also
// carry the command).
func shells(ps []string) []string {
	var out []string
	for _, p := range ps {
		if f := strings.Fields(p); len(f) > 1 && filepath.Base(strings.Trim(f[1], `"`)) == "sh" {
			out = append(out, p)
		}
	}
	return out
}

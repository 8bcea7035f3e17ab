package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/api"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// builtBinary builds the command once per test binary (CGO off, as
// shipped) into a directory removed at exit by the OS's temp cleaner.
func builtBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "capsule-host-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "capsule-host")
		build := exec.Command("go", "build", "-o", binPath, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// daemonProc is one `capsule-host serve` of the built binary.
type daemonProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startServe(t *testing.T, bin, dir string, args ...string) *daemonProc {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, append([]string{"serve", "--socket", filepath.Join(dir, "d.sock"), "--state-dir", filepath.Join(dir, "state"),
		"--config", filepath.Join(dir, "capsule-host.toml")}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_RUNTIME_DIR="}
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

// awaitServing polls until the daemon answers health, bounded.
func awaitServing(t *testing.T, c *api.Client, d *daemonProc) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(90 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
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
func shellCall(t *testing.T, c *api.Client, principal, tool string, in any) (map[string]any, string) {
	t.Helper()
	b, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Call(ctx, api.CallRequest{Capsule: "shell", Tool: tool, Input: b, Principal: principal})
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == "tool-error" && isNoSuchProcess(ae.Message):
		return nil, "no-such-process" // the shell capsule's one classifier (cmd_demo.go)
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
func counterLines(t *testing.T, what, mark, text string, first int) int {
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
func readAllLogs(t *testing.T, c *api.Client, principal, id string) string {
	t.Helper()
	var sb strings.Builder
	cursor := ""
	for i := 0; i < 1000; i++ {
		in := map[string]any{"id": id, "stream": "stdout", "max_bytes": 1 << 20}
		if cursor != "" {
			in["cursor"] = cursor
		}
		m, code := shellCall(t, c, principal, "read_process_logs", in)
		if code != "" {
			t.Fatalf("read %s: %s", id, code)
		}
		s, _ := m["stdout"].(string)
		sb.WriteString(s)
		cursor, _ = m["cursor"].(string)
		if s == "" {
			return sb.String()
		}
	}
	t.Fatalf("read %s: no end after 1000 reads", id)
	return ""
}

// TestDurableCrash is the crash test on the built binary: 100
// persistent counters (4 principals), then kill -9 of serve, 5 s with no
// daemon, and a new serve on the same state. Every process is re-adopted,
// every stream is gapless from its first byte and kept counting, a
// cursor from before the crash continues exactly, stdin works, processes
// that exited meanwhile report their real exit code, and another
// principal gets no-such-process for every ID.
func TestDurableCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the crash test builds the binary and runs 100 real processes")
	}
	bin := builtBinary(t)
	dir := t.TempDir()
	flag := filepath.Join(dir, "exit-now")
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte("[quotas]\nmax_concurrent = 64\nmax_retained = 64\nmax_entries = 512\n"), 0o600)
	mark := fmt.Sprintf("durable-%d", time.Now().UnixNano())
	counter := fmt.Sprintf(`i=0; while true; do i=$((i+1)); echo "%s $i"; sleep 0.2; done`, mark)
	exiter := fmt.Sprintf(`i=0; while [ ! -e %s ]; do i=$((i+1)); echo "%s $i"; sleep 0.2; done; exit 7`, flag, mark)
	d1 := startServe(t, bin, dir)
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(t, c, d1)
	t.Cleanup(func() { stopMarked(t, mark) })

	type victim struct {
		principal, id string
		exits         bool
	}
	var vs []victim
	for i := 0; i < 100; i++ {
		v := victim{principal: fmt.Sprintf("p%d", i%4), exits: i%20 == 0}
		cmd := counter
		if v.exits {
			cmd = exiter
		}
		m, code := shellCall(t, c, v.principal, "spawn_background_process", map[string]any{"command": cmd})
		if code != "" {
			t.Fatalf("spawn %d: %s", i, code)
		}
		v.id, _ = m["id"].(string)
		vs = append(vs, v)
	}
	m, code := shellCall(t, c, "p0", "spawn_background_process", map[string]any{"command": "cat", "keep_stdin_open": true})
	if code != "" {
		t.Fatalf("spawn cat: %s", code)
	}
	catID, _ := m["id"].(string)
	// A cursor issued before the crash, after at least 3 lines.
	var before string
	var cursor string
	for end := time.Now().Add(30 * time.Second); ; {
		m, _ = shellCall(t, c, vs[1].principal, "read_process_logs", map[string]any{"id": vs[1].id, "stream": "stdout"})
		before, _ = m["stdout"].(string)
		cursor, _ = m["cursor"].(string)
		if strings.Count(before, "\n") >= 3 || time.Now().After(end) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	lastBefore := counterLines(t, "before the crash", mark, before, 1)

	if err := d1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d1.exited
	os.WriteFile(flag, nil, 0o600) // the exiters end while no daemon runs
	time.Sleep(5 * time.Second)    // the downtime: the counters must keep counting

	d2 := startServe(t, bin, dir, "--on-shutdown", "stop")
	took := awaitServing(t, c, d2)
	t.Logf("restart: exec of serve to first answered call %v", took)
	if b, err := os.ReadFile(filepath.Join(dir, "daemon.log")); err == nil {
		for _, ln := range strings.Split(string(b), "\n") {
			if strings.Contains(ln, "journal adopted") || strings.Contains(ln, "journal opened") || strings.Contains(ln, "serving") {
				t.Log(ln)
			}
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			t.Logf("daemon log:\n%s", b)
		}
	})

	// The cursor continues exactly where it stopped.
	m, code = shellCall(t, c, vs[1].principal, "read_process_logs", map[string]any{"id": vs[1].id, "stream": "stdout", "cursor": cursor})
	if code != "" {
		t.Fatalf("read from the pre-crash cursor: %s", code)
	}
	after, _ := m["stdout"].(string)
	counterLines(t, "from the pre-crash cursor", mark, after, lastBefore+1)

	for i, v := range vs {
		text := readAllLogs(t, c, v.principal, v.id)
		last := counterLines(t, fmt.Sprintf("process %d", i), mark, text, 1)
		m, code := shellCall(t, c, v.principal, "list_processes", map[string]any{})
		_ = m
		if code != "" {
			t.Fatalf("list as %s: %s", v.principal, code)
		}
		if !v.exits && last < 25 {
			t.Errorf("process %d counted to %d: it did not keep running through the downtime", i, last)
		}
		other := fmt.Sprintf("p%d", (i+1)%4)
		if _, code := shellCall(t, c, other, "read_process_logs", map[string]any{"id": v.id}); code != "no-such-process" {
			t.Errorf("%s reading %s's process %d: %q, want no-such-process", other, v.principal, i, code)
		}
	}
	// The exiters' real exit code, recorded while no daemon ran.
	for i, v := range vs {
		if !v.exits {
			continue
		}
		st := processExit(t, c, v.principal, v.id)
		if st != "7" {
			t.Errorf("process %d exited during the downtime: exit %q, want code 7", i, st)
		}
	}
	// stdin of a process started before the crash.
	if _, code := shellCall(t, c, "p0", "write_process_stdin", map[string]any{"id": catID, "data": "after the crash\n"}); code != "" {
		t.Fatalf("write stdin after the restart: %s", code)
	}
	for end := time.Now().Add(20 * time.Second); !strings.Contains(readAllLogs(t, c, "p0", catID), "after the crash"); {
		if time.Now().After(end) {
			t.Fatal("the pre-crash cat did not echo what was written after the restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := d2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d2.exited:
	case <-time.After(90 * time.Second):
		t.Fatal("serve did not stop within 90 s of SIGTERM")
	}
	waitNoMarked(t, mark, 30*time.Second)
}

// processExit is the exit code (or "signal N") list_processes reports.
func processExit(t *testing.T, c *api.Client, principal, id string) string {
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
func waitNoMarked(t *testing.T, mark string, d time.Duration) {
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
func stopMarked(t *testing.T, mark string) {
	for _, s := range withMarker(mark) {
		if pid, err := strconv.Atoi(strings.Fields(s)[0]); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

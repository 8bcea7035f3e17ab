//go:build !leanclient

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// TestE2EBuiltBinary drives the BUILT binary the way an operator would:
// serve on a temporary socket and state directory; four calls through the
// CLI with the bundled shell capsule (spawn, read, read as another
// principal, stop); ps and logs; SIGTERM; then nothing may be left: no
// process of the daemon's tree, no socket.
func TestE2EBuiltBinary(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	if testing.Short() {
		t.Skip("SKIP: -short: the end-to-end test builds the binary and runs real processes")
	}
	if bundledFS == nil {
		t.Fatal("the binary has no bundled capsules: capsules/embed.go must embed the shell capsule")
	}
	dir := t.TempDir()
	bin := builtBinary(t)
	sock := filepath.Join(dir, "run", "capsule-host.sock")
	state := filepath.Join(dir, "state")
	// A clean environment: no user config, no XDG paths of the machine.
	envv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_RUNTIME_DIR=", "XDG_STATE_HOME=" + filepath.Join(dir, "xdg-state")}

	// The log goes to a file, not a pipe: a pipe would keep Wait blocked
	// on any process that inherited it, hiding the very leak we look for.
	logPath := filepath.Join(dir, "daemon.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	daemonLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	srv := exec.Command(bin, "serve", "--socket", sock, "--state-dir", state, "--on-shutdown", "stop")
	srv.Env = envv
	srv.Stdout = logf
	srv.Stderr = logf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = srv.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			srv.Process.Kill()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Errorf("the daemon did not die of SIGKILL within 10s")
			}
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", daemonLog())
		}
	})

	cli := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--socket", sock)...)
		cmd.Env = envv
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		go func() { <-ctx.Done(); _ = cmd.Process.Kill() }()
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return o.String(), e.String(), code
	}

	// Wait for the daemon to answer.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, _, code := cli("capsules"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not come up within 60s")
		}
		select {
		case <-exited:
			t.Fatalf("the daemon exited early: %v", waitErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", st, err)
	}

	marker := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	script := fmt.Sprintf(`i=0; while true; do i=$((i+1)); echo "%s tick $i"; sleep 0.1; done`, marker)
	call := func(principal, tool string, in any) (map[string]any, string, int) {
		t.Helper()
		b, _ := json.Marshal(in)
		out, errOut, code := cli("call", "shell", tool, string(b), "--principal", principal, "--json")
		if code != 0 {
			return nil, errOut, code
		}
		var res api.CallResponse
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%s: %v: %q", tool, err, out)
		}
		m := map[string]any{}
		if err := json.Unmarshal(res.Output, &m); err != nil {
			t.Fatalf("%s output is not an object: %s", tool, res.Output)
		}
		return m, errOut, 0
	}

	// 1. spawn.
	m, errOut, code := call("alice", "spawn_background_process", map[string]any{"command": script, "label": "e2e"})
	if code != 0 {
		t.Fatalf("spawn: exit %d: %s", code, errOut)
	}
	id := str(m, "id", "process_id")
	if len(id) != 52 {
		t.Fatalf("spawn returned no 52-character id: %v", m)
	}
	// 2. read.
	var text string
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		m, errOut, code = call("alice", "read_process_logs", map[string]any{"id": id})
		if code != 0 {
			t.Fatalf("read: exit %d: %s", code, errOut)
		}
		if text = str(m, "text", "data", "output", "stdout"); strings.Contains(text, marker+" tick 2") {
			break
		}
	}
	if !strings.Contains(text, marker+" tick 1") {
		t.Fatalf("read did not return the output: %v", m)
	}
	// 3. read as another principal.
	_, errOut, code = call("bob", "read_process_logs", map[string]any{"id": id})
	var er api.ErrorResponse // --json: the error body on stderr
	if code != exitFailed || json.Unmarshal([]byte(errOut), &er) != nil || er.Error.ToolCode != api.CodeNoSuchProcess {
		t.Fatalf("bob's read: exit %d, stderr %q; want no-such-process", code, errOut)
	}

	// ps and logs (operator view) while it runs; remember the process tree.
	out, _, code := cli("ps")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "alice") || !strings.Contains(out, "running") {
		t.Fatalf("ps: %d %q", code, out)
	}
	out, _, code = cli("logs", id)
	if code != 0 || !strings.Contains(out, marker+" tick 1\n") {
		t.Fatalf("logs: %d %q", code, out)
	}
	tree := descendants(srv.Process.Pid)
	if len(tree) == 0 {
		t.Fatalf("no child process of the daemon found while the script runs")
	}

	// 4. stop.
	m, errOut, code = call("alice", "kill_process", map[string]any{"id": id, "grace_ms": 2000})
	if code != 0 {
		t.Fatalf("stop: exit %d: %s", code, errOut)
	}
	out, _, code = cli("ps", "--json")
	if code != 0 || !strings.Contains(out, `"phase": "exited"`) || !strings.Contains(out, `"reason": "stopped"`) {
		t.Fatalf("ps after stop: %d %q", code, out)
	}
	out, errOut, code = cli("logs", id, "-f")
	if code != 0 || !strings.Contains(out, marker+" tick 1\n") || !strings.Contains(errOut, "ended") {
		t.Fatalf("logs -f of the stopped process: %d %q %q", code, out, errOut)
	}

	// A second process left running: shutdown must stop it and say so.
	m, errOut, code = call("alice", "spawn_background_process", map[string]any{"command": script, "label": "left-running"})
	if code != 0 {
		t.Fatalf("second spawn: %d %s", code, errOut)
	}
	id2 := str(m, "id", "process_id")
	out, _, code = cli("inspect", id2, "--json")
	var p2 api.Process
	if code != 0 || json.Unmarshal([]byte(out), &p2) != nil || p2.LogID == "" {
		t.Fatalf("inspect: %d %q", code, out)
	}
	time.Sleep(300 * time.Millisecond)
	tree = append(tree, descendants(srv.Process.Pid)...)

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("the daemon exited with %v after SIGTERM", waitErr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the daemon did not exit within 60s of SIGTERM")
	}
	logs := daemonLog()
	for _, want := range []string{"shutting down", "stopping persistent process for shutdown", "proc=" + p2.LogID, "persistent processes stopped", "capsule-host stopped"} {
		if !strings.Contains(logs, want) {
			t.Errorf("daemon log lacks %q", want)
		}
	}
	if strings.Contains(logs, id) || strings.Contains(logs, id2) {
		t.Errorf("a raw process ID reached the daemon log")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	for _, p := range tree {
		if p.alive() {
			t.Errorf("process %d (%s) outlived the daemon", p.pid, p.cmd)
		}
	}
	if left := withMarker(marker); len(left) > 0 {
		t.Errorf("processes running the test script outlived the daemon: %v", left)
	}
}

// proc identifies a process by PID and start time, so a reused PID is not
// mistaken for a survivor.
type proc struct {
	pid   int
	start string
	cmd   string
}

func (p proc) alive() bool {
	st, ok := procStat(p.pid)
	return ok && st.start == p.start && st.state != "Z"
}

type statInfo struct {
	ppid         int
	start, state string
}

func procStat(pid int) (statInfo, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return statInfo{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return statInfo{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return statInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return statInfo{ppid: ppid, state: f[0], start: f[19]}, true
}

// descendants lists every live process below root.
func descendants(root int) []proc {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok {
			children[st.ppid] = append(children[st.ppid], pid)
		}
	}
	var out []proc
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			st, ok := procStat(c)
			if !ok {
				continue
			}
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
			out = append(out, proc{pid: c, start: st.start, cmd: strings.ReplaceAll(string(cmd), "\x00", " ")})
			walk(c)
		}
	}
	walk(root)
	return out
}

// withMarker lists live processes whose command line contains marker.
func withMarker(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		if st, ok := procStat(pid); ok && st.state != "Z" {
			out = append(out, fmt.Sprintf("%d %q", pid, strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return out
}

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
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// TestAuthorLoop is the capsule author's loop from the README, with the
// built binary in a temporary directory outside the checkout: new, build,
// validate, go test, serve --watch, call, edit the source, rebuild, pin,
// call the new version; a persistent process started by the first
// version keeps running through the reload and answers the second. Then
// SIGTERM (on_shutdown = stop): nothing is left running.
func TestAuthorLoop(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	dir := t.TempDir()
	capDir := filepath.Join(dir, "loopcap")
	sock := filepath.Join(dir, "d.sock")
	// Host tools (go, build.sh) run with the caller's environment (module
	// cache, proxy settings); the CLI with a clean one.
	tool := func(timeout time.Duration, wd string, extraEnv []string, name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = wd
		cmd.Env = append(append(os.Environ(), "CAPSULE_HOST="+bin), extraEnv...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	cliEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_RUNTIME_DIR="}
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(args, "--socket", sock)...)
		cmd.Dir = dir
		cmd.Env = cliEnv
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%v: %v", args, err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}

	// new (outside the checkout: a go.mod with a replace to it), build,
	// validate, and the scaffold's own test.
	if out := tool(5*time.Minute, dir, nil, bin, "new", "loopcap", capDir, "--sdk", repoRoot(t)); !strings.Contains(out, "created ") {
		t.Fatalf("new: %s", out)
	}
	if mod, _ := os.ReadFile(filepath.Join(capDir, "go.mod")); !strings.Contains(string(mod), "replace github.com/capsule-host/capsule-host => "+repoRoot(t)) {
		t.Fatalf("go.mod outside the checkout:\n%s", mod)
	}
	if out := tool(5*time.Minute, capDir, nil, "./build.sh"); !strings.Contains(out, "pinned loopcap: sha256 (none)→") {
		t.Fatalf("build.sh: %s", out)
	}
	if out, errOut, code := cli("validate", capDir); code != exitOK || !strings.Contains(out, "tools    greet, start, status, stop") {
		t.Fatalf("validate: exit %d\n%s\n%s", code, out, errOut)
	}
	tool(5*time.Minute, capDir, nil, "go", "test", "-count=1", "./...")

	// serve --watch on the capsule alone.
	conf := fmt.Sprintf("bundled = false\ncapsules = [%q]\nshutdown_grace = \"5s\"\n\n[processes]\non_shutdown = \"stop\"\n", capDir)
	if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startServe(t, bin, dir, "--watch", "--watch-poll", "100ms")
	// The sleeper's seconds make its command line unique on this machine
	// (sleep, NUL, the seconds: also in its bwrap parent's).
	mark := fmt.Sprintf("%d", 1000000+time.Now().UnixNano()%8000000)
	sleeper := "sleep\x00" + mark
	t.Cleanup(func() { stopMarked(t, sleeper) })
	call := func(tool, in string, out any) {
		t.Helper()
		o, errOut, code := cli("call", "loopcap", tool, in, "--principal", "alice", "--json", "--wait", "2m")
		var res api.CallResponse
		if code != exitOK || json.Unmarshal([]byte(o), &res) != nil || json.Unmarshal(res.Output, out) != nil {
			t.Fatalf("call %s %s: exit %d\n%s\n%s", tool, in, code, o, errOut)
		}
	}
	var g struct{ Greeting string }
	call("greet", `{"name":"world"}`, &g)
	if g.Greeting != "hello, world" {
		t.Fatalf("greet v0.1.0: %q", g.Greeting)
	}
	var p struct{ ID string }
	call("start", `{"seconds":`+mark+`}`, &p)
	if len(p.ID) != 52 {
		t.Fatalf("start: id %q", p.ID)
	}

	// Edit, rebuild (build.sh pins), pin (nothing left to do), and the
	// watcher reloads the new version.
	edit := func(file, old, new string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(capDir, file))
		if err != nil || !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%s has no %q (%v)", file, old, err)
		}
		if err := os.WriteFile(filepath.Join(capDir, file), bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("main.go", `"hello, " + in.Name`, `"hi, " + in.Name`)
	edit("Capsule.toml", `version = "0.1.0"`, `version = "0.2.0"`)
	if out := tool(5*time.Minute, capDir, nil, "./build.sh"); !strings.Contains(out, "pinned loopcap: sha256 ") {
		t.Fatalf("rebuild: %s", out)
	}
	if out, errOut, code := cli("pin", capDir); code != exitOK || !strings.HasPrefix(out, "already pinned loopcap") {
		t.Fatalf("pin after build.sh: exit %d\n%s\n%s", code, out, errOut)
	}
	// The watcher may load the edited manifest before the rebuild (its
	// pin still matching the old module), then the rebuild: wait for the
	// new code.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _, code := cli("capsules", "--json")
		if code == exitOK && strings.Contains(out, `"version": "0.2.0"`) {
			call("greet", `{"name":"world"}`, &g)
			if g.Greeting == "hi, world" {
				break
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			t.Fatalf("the watcher did not load the rebuilt 0.2.0 within 2m: %s (greet %q)\n%s", out, g.Greeting, b)
		}
		select {
		case <-d.exited:
			t.Fatalf("serve exited: %v", d.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	var s struct{ Phase string }
	call("status", `{"id":"`+p.ID+`"}`, &s)
	if s.Phase != "running" {
		t.Fatalf("the sleeper after the reload: phase %q", s.Phase)
	}
	if len(withMarker(sleeper)) == 0 {
		t.Fatal("the sleeper is not running on the host")
	}

	// A tool's typed error passes through: no-such-process, not a bare
	// tool-error (the SDK codes every process error).
	bogus := strings.Repeat("a", 52)
	if o, errOut, code := cli("call", "loopcap", "status", `{"id":"`+bogus+`"}`, "--principal", "alice", "--json"); code != exitFailed ||
		!strings.Contains(errOut, `"code":"tool-error"`) || !strings.Contains(errOut, `"tool_code":"no-such-process"`) {
		t.Fatalf("status of an unknown id: exit %d\n%s\n%s", code, o, errOut)
	}

	// SIGTERM with on_shutdown = stop: serve exits 0 and the sleeper ends.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
		if d.err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", d.err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("serve did not exit within 90s of SIGTERM")
	}
	waitFor(t, func() bool { return len(withMarker(sleeper)) == 0 })
	if b, _ := os.ReadFile(filepath.Join(dir, "daemon.log")); !bytes.Contains(b, []byte("capsule directory changed: reloading")) || !bytes.Contains(b, []byte("compiling capsule")) {
		t.Fatalf("the daemon log lacks the watch reload or the compile progress:\n%s", b)
	}
}

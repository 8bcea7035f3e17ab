//go:build !leanclient

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The lean client build links none of the heavy packages: that is its
// whole point (BenchmarkClientVsTmux measures what it buys).
func TestLeanClientLinksNoHeavyPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "leanclient", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"github.com/santhosh-tekuri/jsonschema", "github.com/tetratelabs/wazero", "github.com/bytecodealliance/",
			"/capsule-host/host/engine", "/capsule-host/registry", "/capsule-host/cmd/capsule-host/internal/daemon", "net/http"} {
			if strings.Contains(dep, heavy) {
				t.Errorf("the lean client links %s", dep)
			}
		}
		if strings.HasPrefix(dep, "github.com/capsule-host/capsule-host/sandbox") && dep != "github.com/capsule-host/capsule-host/sandbox/reexec" {
			t.Errorf("the lean client links %s", dep)
		}
	}
}

// The lean client answers the client commands exactly as the full binary
// does, and hands every other command (and --tcp) to capsule-hostd with
// the same output and exit code.
func TestLeanClientMatchesFullBinary(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	if testing.Short() {
		t.Skip("SKIP: -short: builds both binaries and runs a daemon")
	}
	r := newClientBench(t, false)
	run := func(bin string, env []string, args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return o.String(), e.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s %v: %v", bin, args, err)
		}
		return o.String(), e.String(), 0
	}
	sock := []string{"--socket", r.sock}
	for _, args := range [][]string{
		{"capsules"}, {"tools", "shell"}, {"ps", "--principal", "nobody"}, {"logs", r.id}, {"logs", r.id, "--json", "--max", "5"}, {"inspect", "nope"},
		{"call", "shell", "read_process_logs", `{"id":"` + r.id + `"}`, "--principal", "bench"}, {"call", "shell", "nope"},
		{"call", "shell", "x", "{bad"}, {"version"}, {"help"}, {"help", "serve"}, {"serve", "-h"}, {"nosuch"}, {},
		{"capsules", "--tcp", "127.0.0.1:1"}, // no token: the full binary's usage error
	} {
		args = append(args, sock...)
		fo, fe, fc := run(r.bin, r.env, args...)
		lo, le, lc := run(r.leanBin, r.env, args...)
		if lo != fo || le != fe || lc != fc {
			t.Errorf("%v: lean (exit %d)\n%s%s\nfull (exit %d)\n%s%s", args, lc, lo, le, fc, fo, fe)
		}
	}
	// Without capsule-hostd the lean client says what it needs.
	alone := filepath.Join(t.TempDir(), "capsule-host")
	b, err := os.ReadFile(r.leanBin)
	if err != nil || writeExecutable(alone, b) != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(alone, []string{"PATH=/nonexistent"}, "serve")
	if code != exitFailed || !strings.Contains(errOut, "capsule-hostd") {
		t.Fatalf("lean serve without capsule-hostd: exit %d, %q", code, errOut)
	}
	if out, _, code := run(alone, r.env, append([]string{"capsules"}, sock...)...); code != 0 || !strings.Contains(out, "shell") {
		t.Fatalf("lean capsules without capsule-hostd: exit %d, %q", code, out)
	}
}

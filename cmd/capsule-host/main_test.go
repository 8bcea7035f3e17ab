//go:build !leanclient

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/wit"
)

// runCLI runs the dispatcher in-process, as main does.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &o, &e)
	return o.String(), e.String(), code
}

// Every command has help text, reachable three ways, exiting 0.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			if c.summary == "" {
				t.Fatal("no summary")
			}
			for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
				out, errOut, code := runCLI(t, "", args...)
				if code != exitOK {
					t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
				}
				if !strings.Contains(out, "Usage: capsule-host "+c.name) || !strings.Contains(out, c.summary) {
					t.Fatalf("%v: help lacks usage or summary:\n%s", args, out)
				}
			}
			top, _, _ := runCLI(t, "", "help")
			if c.name != "help" && !strings.Contains(top, "    "+c.name+" ") {
				t.Fatalf("top-level help does not list %s", c.name)
			}
		})
	}
}

func TestDispatcher(t *testing.T) {
	nosock := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		name    string
		args    []string
		code    int
		stdout  string // substring
		stderr  string // substring
		noStdin bool
	}{
		{"no args", nil, exitUsage, "", "Usage:", false},
		{"top help", []string{"-h"}, exitOK, "Commands:", "", false},
		{"unknown command", []string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`, false},
		{"unknown flag", []string{"ps", "--bogus"}, exitUsage, "", "flag provided but not defined: -bogus", false},
		{"too few args", []string{"call", "shell"}, exitUsage, "", "wrong number of arguments", false},
		{"too many args", []string{"inspect", "a", "b"}, exitUsage, "", "usage: capsule-host inspect ID", false},
		{"bad json input", []string{"call", "shell", "t", "{nope", "--socket", nosock}, exitUsage, "", "not valid JSON", false},
		{"bad grace", []string{"stop", "x", "--grace", "soon", "--socket", nosock}, exitUsage, "", "--grace", false},
		{"version", []string{"version"}, exitOK, "capsule:process@1.1.0", "", false},
		{"version flag", []string{"--version"}, exitOK, "engines:", "", false},
		{"version json", []string{"version", "--json"}, exitOK, `"default_engine": "wazero"`, "", false},
		{"wit all", []string{"wit"}, exitOK, "package capsule:process@1.1.0", "", false},
		{"wit one", []string{"wit", "1.0.0"}, exitOK, "package capsule:process@1.0.0", "", false},
		{"wit short", []string{"wit", "process@1.1"}, exitOK, "spawn-persistent", "", false},
		{"wit guest", []string{"wit", "guest"}, exitOK, "capsule:guest@1.0.0", "", false},
		{"wit list", []string{"wit", "--list"}, exitOK, "capsule:process  1.1.0", "", false},
		{"wit unknown", []string{"wit", "9.9"}, exitFailed, "", "no contract version matches", false},
		{"token", []string{"token"}, exitOK, "token_sha256 = [", "", false},
		{"validate missing", []string{"validate", t.TempDir()}, exitFailed, "", "Capsule.toml", false},
		{"globals before command", []string{"--socket", nosock, "ps"}, exitUnreachable, "", nosock, false},
		{"globals after args", []string{"inspect", "x", "--socket", nosock}, exitUnreachable, "", nosock, false},
		{"flags after positional", []string{"call", "c", "t", "{}", "--principal", "p", "--socket", nosock}, exitUnreachable, "", "capsule-host serve", false},
		{"tcp without token", []string{"ps", "--tcp", "127.0.0.1:1"}, exitUsage, "", "CAPSULE_HOST_TOKEN", false},
		{"capsules unreachable", []string{"capsules", "--socket", nosock}, exitUnreachable, "", "unreachable", false},
		{"tools unreachable", []string{"tools", "shell", "--socket", nosock}, exitUnreachable, "", "unreachable", false},
		{"logs unreachable", []string{"logs", "x", "-f", "--socket", nosock}, exitUnreachable, "", "unreachable", false},
		{"stop unreachable", []string{"stop", "x", "--socket", nosock}, exitUnreachable, "", "unreachable", false},
		{"bad config", []string{"serve", "--config", "/nonexistent/capsule-host.toml"}, exitFailed, "", "/nonexistent/capsule-host.toml", false},
		{"bad engine", []string{"serve", "--engine", "v8", "--state-dir", t.TempDir(), "--socket", nosock}, exitFailed, "", `unknown engine "v8"`, false},
		{"help unknown", []string{"help", "nope"}, exitUsage, "", "unknown command", false},
	}
	t.Setenv("CAPSULE_HOST_TOKEN", "")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, "", tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
			}
			if !strings.Contains(out, tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, out)
			}
			if !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, errOut)
			}
			if code != exitOK && tc.stdout == "" && out != "" && tc.code != exitUsage {
				t.Errorf("a failing command wrote to stdout: %q", out)
			}
		})
	}
}

func TestWasmtimeNotCompiledInSaysHowToBuild(t *testing.T) {
	for _, e := range hostEngines() {
		if e == "wasmtime" {
			t.Skip("SKIP (expected in the -tags wasmtime leg): wasmtime is compiled in, so there is no error to check")
		}
	}
	_, errOut, code := runCLI(t, "", "serve", "--engine", "wasmtime", "--state-dir", t.TempDir(), "--socket", filepath.Join(t.TempDir(), "s.sock"))
	if code != exitFailed || !strings.Contains(errOut, "-tags wasmtime") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestTokenJSONHashMatches(t *testing.T) {
	out, _, code := runCLI(t, "", "token", "--json")
	if code != 0 {
		t.Fatal(code)
	}
	var v map[string]string
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if len(v["token"]) < 40 || len(v["sha256"]) != 64 {
		t.Fatalf("%v", v)
	}
}

func TestParseInterleavedDoubleDash(t *testing.T) {
	out, _, code := runCLI(t, "", "wit", "--", "--list")
	if code != exitFailed || out != "" {
		t.Fatalf("after --, --list must be a positional argument (exit %d)", code)
	}
}

func TestLoadConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.toml")
	os.WriteFile(p, []byte("socket = \"/tmp/from-config.sock\"\n"), 0o600)
	t.Setenv("CAPSULE_HOST_CONFIG", p)
	t.Setenv("CAPSULE_HOST_SOCKET", "")
	e := &env{g: &globals{}}
	if s, err := socketPath(e); err != nil || s != "/tmp/from-config.sock" {
		t.Fatalf("%q %v", s, err)
	}
	t.Setenv("CAPSULE_HOST_SOCKET", "/tmp/from-env.sock")
	if s, _ := socketPath(e); s != "/tmp/from-env.sock" {
		t.Fatalf("%q", s)
	}
	e.g.socket = "/tmp/from-flag.sock"
	if s, _ := socketPath(e); s != "/tmp/from-flag.sock" {
		t.Fatalf("%q", s)
	}
	t.Setenv("CAPSULE_HOST_CONFIG", filepath.Join(dir, "missing.toml"))
	if _, err := loadConfig(&env{g: &globals{}}); err == nil {
		t.Fatal("an explicitly named missing config must be an error")
	}
}

// wit --out writes the contract in wit-parser's package-with-deps
// layout, byte for byte the embedded files.
func TestWITOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wit")
	out, errOut, code := runCLI(t, "", "wit", "--out", dir)
	if code != exitOK {
		t.Fatalf("wit --out: %d %s", code, errOut)
	}
	want := map[string]string{"guest.wit": "guest@1.0.0/guest.wit", "deps/process@1.0.0/host.wit": "process@1.0.0/host.wit",
		"deps/process@1.1.0/host.wit": "process@1.1.0/host.wit", "deps/process@1.2.0/host.wit": "process@1.2.0/host.wit"}
	for rel, src := range want {
		got, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		emb, _ := fs.ReadFile(wit.FS, src)
		if !bytes.Equal(got, emb) {
			t.Errorf("%s differs from the embedded %s", rel, src)
		}
		if !strings.Contains(out, filepath.Join(dir, rel)) {
			t.Errorf("output does not list %s:\n%s", rel, out)
		}
	}
	// Nothing else: a stray package would be read as part of the contract.
	var all []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			all = append(all, p)
		}
		return err
	})
	if len(all) != len(want) {
		t.Errorf("wrote %v", all)
	}
	if _, errOut, code := runCLI(t, "", "wit", "1.1", "--out", dir); code != exitUsage || !strings.Contains(errOut, "whole contract") {
		t.Errorf("wit 1.1 --out: %d %s", code, errOut)
	}
}

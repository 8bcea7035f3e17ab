//go:build !leanclient

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/config"
)

// The demo runs on every engine compiled in (wazero always; wasmtime in
// the -tags wasmtime leg).
func TestDemoTellsTheStory(t *testing.T) {
	t.Parallel() // in-process, its own temporary state; changes no environment (RFC §13)
	for _, eng := range hostEngines() {
		t.Run(eng, func(t *testing.T) { testDemo(t, eng) })
	}
}

func testDemo(t *testing.T, engine string) {
	out, errOut, code := runCLI(t, "", "demo", "--engine", engine)
	if !strings.Contains(out, "engine "+engine) {
		t.Errorf("demo does not name engine %s", engine)
	}
	if code != exitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"1. alice asks the shell capsule",
		"read 1 on instance #", "read 2 on instance #", "two reads on two instances",
		"3. bob presents the very same ID", "no-such-process",
		"4. alice stops it", "exited on signal 15", "reason stopped",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tick 1") == false {
		t.Errorf("demo shows no process output:\n%s", out)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(dst, 0o755)
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel() // in-process, copies the capsule before editing it (RFC §13)
	shell, _ := filepath.Abs("../../capsules/shell")
	out, errOut, code := runCLI(t, "", "validate", shell)
	if code != exitOK || !strings.Contains(out, "capsule:process/host@1.1.0") || !strings.Contains(out, "served") ||
		!strings.Contains(out, "spawn_background_process") || !strings.Contains(out, "ok: ") {
		t.Fatalf("validate shell: %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = runCLI(t, "", "validate", shell, "--json")
	var rep validateReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || !rep.OK || rep.Capsule != "shell" || len(rep.Tools) != 12 { // 6 pipe tools, 6 terminal tools
		t.Fatalf("validate --json: %d %s", code, out)
	}

	manifest, err := os.ReadFile(filepath.Join(shell, "Capsule.toml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, edit, want string
	}{
		{"unknown key", strings.Replace(string(manifest), "[capabilities]\n", "[capabilities]\nexecc = []\n", 1), "capabilities.execc"},
		{"checksum", strings.Replace(string(manifest), rep.SHA256, strings.Repeat("0", 64), 1), "capsule.sha256"},
		{"import version", strings.Replace(string(manifest), `"capsule:process" = "1.2"`, `"capsule:process" = "2.0"`, 1), `imports."capsule:process"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "shell")
			copyDir(t, shell, dir)
			if err := os.WriteFile(filepath.Join(dir, "Capsule.toml"), []byte(tc.edit), 0o644); err != nil {
				t.Fatal(err)
			}
			_, errOut, code := runCLI(t, "", "validate", dir)
			if code != exitFailed {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			// Problems are file:line: messages.
			prefix := filepath.Join(dir, "Capsule.toml") + ":"
			if !strings.Contains(errOut, prefix) || !strings.Contains(errOut, tc.want) {
				t.Fatalf("stderr lacks %q... %q:\n%s", prefix, tc.want, errOut)
			}
			line := strings.SplitN(strings.TrimPrefix(errOut[strings.Index(errOut, prefix):], prefix), ":", 2)[0]
			if line == "" || line == "0" || strings.Trim(line, "0123456789") != "" {
				t.Fatalf("no line number in %q", errOut)
			}
		})
	}
}

func TestLoggerFormats(t *testing.T) {
	var b bytes.Buffer
	lg, err := newLogger(&b, &globals{logJSON: true}, config.Default())
	if err != nil {
		t.Fatal(err)
	}
	lg.Info("hello", "capsule", "shell")
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["msg"] != "hello" || m["capsule"] != "shell" {
		t.Fatalf("--log-json: %q", b.String())
	}
	b.Reset()
	lg, _ = newLogger(&b, &globals{logLevel: "warn"}, config.Default())
	lg.Info("hidden")
	lg.Warn("shown")
	if strings.Contains(b.String(), "hidden") || !strings.Contains(b.String(), "level=WARN msg=shown") {
		t.Fatalf("text/warn: %q", b.String())
	}
	if _, err := newLogger(&b, &globals{logLevel: "loud"}, config.Default()); err == nil {
		t.Fatal("bad level accepted")
	}
}

//go:build !leanclient

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// testcapCopy is a scratch copy of capsules/testcap, its module's digest
// and its manifest text.
func testcapCopy(t *testing.T) (dir, digest, manifestText string) {
	t.Helper()
	src, _ := filepath.Abs("../../capsules/testcap")
	dir = filepath.Join(t.TempDir(), "testcap")
	copyDir(t, src, dir)
	wasm, err := os.ReadFile(filepath.Join(dir, "testcap.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(wasm)
	b, err := os.ReadFile(filepath.Join(dir, "Capsule.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, hex.EncodeToString(s[:]), string(b)
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

var pinLineRE = regexp.MustCompile(`(?m)^sha256 = "[0-9a-f]{64}"$`)

// withPin is the manifest with its sha256 line replaced by line.
func withPin(t *testing.T, text, line string) string {
	t.Helper()
	if len(pinLineRE.FindAllString(text, -1)) != 1 {
		t.Fatalf("the manifest has not one plain sha256 line:\n%s", text)
	}
	return pinLineRE.ReplaceAllLiteralString(text, line)
}

func writeManifest(t *testing.T, dir, text string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, "Capsule.toml")
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func readManifest(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "Capsule.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pin rewrites the value alone (a trailing comment stays), keeps the
// mode, says what changed; a second run says already pinned and leaves
// the file alone; --check exits 1 on a stale pin without writing.
func TestPinRewritesInPlace(t *testing.T) {
	dir, digest, text := testcapCopy(t)
	stale := strings.Repeat("e050", 16)
	writeManifest(t, dir, withPin(t, text, `sha256 = "`+stale+`"   # pinned by "pin"`), 0o640)
	files := dirNames(t, dir)

	out, errOut, code := runCLI(t, "", "pin", "--check", dir)
	if code != exitFailed || out != "" || !strings.Contains(errOut, "Capsule.toml:9: stale pin testcap: sha256 e050…→"+digest[:4]+"…") ||
		!strings.Contains(errOut, "run: capsule-host pin "+dir) {
		t.Fatalf("--check stale: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if readManifest(t, dir) != withPin(t, text, `sha256 = "`+stale+`"   # pinned by "pin"`) {
		t.Fatal("--check wrote the manifest")
	}

	out, errOut, code = runCLI(t, "", "pin", dir)
	if code != exitOK || !regexp.MustCompile(`^pinned testcap: sha256 e050…→`+digest[:4]+`… \(testcap\.wasm, [0-9.]+ MB\)\n$`).MatchString(out) {
		t.Fatalf("pin: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if got, want := readManifest(t, dir), withPin(t, text, `sha256 = "`+digest+`"   # pinned by "pin"`); got != want {
		t.Fatalf("manifest after pin:\n%s\nwant:\n%s", got, want)
	}
	fi, err := os.Stat(filepath.Join(dir, "Capsule.toml"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode after pin: %v %v", fi.Mode(), err)
	}
	if after := dirNames(t, dir); !slices.Equal(after, files) {
		t.Fatalf("pin left files behind: %v, before %v", after, files)
	}

	before := readManifest(t, dir)
	out, _, code = runCLI(t, "", "pin", dir)
	if code != exitOK || !strings.HasPrefix(out, "already pinned testcap: sha256 "+digest[:4]+"… (testcap.wasm, ") || readManifest(t, dir) != before {
		t.Fatalf("second pin: exit %d %q", code, out)
	}
	if _, _, code = runCLI(t, "", "pin", "--check", dir); code != exitOK {
		t.Fatalf("--check on a fresh pin: exit %d", code)
	}

	out, _, code = runCLI(t, "", "pin", dir, "--json")
	var rep pinReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.Status != "already-pinned" || rep.SHA256 != digest ||
		rep.Capsule != "testcap" || rep.Module != "testcap.wasm" || rep.Line != 9 || rep.Bytes == 0 {
		t.Fatalf("--json: exit %d %s", code, out)
	}
}

// An absent sha256 is added on the line after module, written like it;
// the JSON says so.
func TestPinInsertsAbsentKey(t *testing.T) {
	dir, digest, text := testcapCopy(t)
	in := strings.Replace(text, pinLineRE.FindString(text)+"\n", "", 1)
	writeManifest(t, dir, in, 0o644)
	if _, errOut, code := runCLI(t, "", "validate", dir); code != exitFailed ||
		!strings.Contains(errOut, "Capsule.toml:5: capsule.sha256: missing required key in [capsule]; run: capsule-host pin "+dir) {
		t.Fatalf("validate without a pin: exit %d\n%s", code, errOut)
	}
	out, errOut, code := runCLI(t, "", "pin", dir, "--json")
	var rep pinReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.Status != "pinned" || !rep.Inserted || rep.Line != 9 || rep.Old != "" {
		t.Fatalf("pin: exit %d\n%s\n%s", code, out, errOut)
	}
	want := strings.Replace(in, "module = \"testcap.wasm\"\n", "module = \"testcap.wasm\"\nsha256 = \""+digest+"\"\n", 1)
	if got := readManifest(t, dir); got != want {
		t.Fatalf("manifest:\n%s\nwant:\n%s", got, want)
	}
}

// Bad input: each is refused with file:line (or the file, when there is
// no manifest to have lines), and the manifest is left as it was.
func TestPinBadInput(t *testing.T) {
	_, _, text := testcapCopy(t)
	outside := filepath.Join(t.TempDir(), "evil.wasm")
	os.WriteFile(outside, []byte("\x00asm\x01\x00\x00\x00"), 0o644)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string // after the manifest's path
	}{
		{"no manifest", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "Capsule.toml")) }, ": no manifest: "},
		{"syntax", func(t *testing.T, dir string) {
			writeManifest(t, dir, strings.Replace(text, "max = 8", "max = = 8", 1), 0o644)
		}, ":22: TOML syntax"},
		{"unknown key", func(t *testing.T, dir string) {
			writeManifest(t, dir, strings.Replace(text, "[pool]\n", "[pool]\nmaxx = 3\n", 1), 0o644)
		}, ":21: pool.maxx: unknown key"},
		{"module missing", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "testcap.wasm")) },
			":8: capsule.module: lstat " + "DIR/testcap.wasm: no such file or directory"},
		{"module escapes", func(t *testing.T, dir string) {
			writeManifest(t, dir, strings.Replace(text, `module = "testcap.wasm"`, `module = "../testcap.wasm"`, 1), 0o644)
		}, `:8: capsule.module: "../testcap.wasm" leaves the capsule directory`},
		{"module symlink escapes", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "testcap.wasm"))
			os.Symlink(outside, filepath.Join(dir, "testcap.wasm"))
		}, `:8: capsule.module: "testcap.wasm" resolves to "` + outside + `", outside the capsule directory`},
		{"pin written as a multi-line string", func(t *testing.T, dir string) {
			writeManifest(t, dir, withPin(t, text, `sha256 = """`+"\n"+strings.Repeat("0", 64)+`"""`), 0o644)
		}, `:9: capsule.sha256: the pin is not written as sha256 = "…" on one line`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, _, _ := testcapCopy(t)
			tc.setup(t, dir)
			before, _ := os.ReadFile(filepath.Join(dir, "Capsule.toml"))
			out, errOut, code := runCLI(t, "", "pin", dir)
			want := filepath.Join(dir, "Capsule.toml") + strings.ReplaceAll(tc.want, "DIR", dir)
			if code != exitFailed || out != "" || !strings.Contains(errOut, want) {
				t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant %q", code, out, errOut, want)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "Capsule.toml")); string(after) != string(before) {
				t.Fatal("a refused pin changed the manifest")
			}
		})
	}
}

// The author's loop with the built binary: corrupt the pin, validate
// fails and names the fix, pin fixes it, validate passes, pin again has
// nothing to do.
func TestPinE2EBuiltBinary(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	if testing.Short() {
		t.Skip("SKIP: -short: the end-to-end test builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "capsule-host")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir, digest, text := testcapCopy(t)
	writeManifest(t, dir, withPin(t, text, `sha256 = "`+strings.Repeat("0", 64)+`" # stale`), 0o644)
	home := t.TempDir()
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = filepath.Dir(dir)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, "config"), "XDG_RUNTIME_DIR="}
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	if _, errOut, code := cli("validate", "testcap"); code != exitFailed ||
		!strings.Contains(errOut, "Capsule.toml:9: capsule.sha256: the module's SHA-256 is "+digest) ||
		!strings.Contains(errOut, "; run: capsule-host pin testcap\n") {
		t.Fatalf("validate with a stale pin: exit %d\n%s", code, errOut)
	}
	if out, errOut, code := cli("pin", "testcap"); code != exitOK || !strings.HasPrefix(out, "pinned testcap: sha256 0000…→"+digest[:4]+"… (testcap.wasm, ") {
		t.Fatalf("pin: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := readManifest(t, dir); got != withPin(t, text, `sha256 = "`+digest+`" # stale`) {
		t.Fatalf("manifest after pin:\n%s", got)
	}
	if out, errOut, code := cli("validate", "testcap"); code != exitOK || !strings.Contains(out, "ok: ") {
		t.Fatalf("validate after pin: exit %d\n%s\n%s", code, out, errOut)
	}
	if out, errOut, code := cli("pin", "testcap"); code != exitOK || !strings.HasPrefix(out, "already pinned testcap") {
		t.Fatalf("pin again: exit %d\n%s\n%s", code, out, errOut)
	}
}

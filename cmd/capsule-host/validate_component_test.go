//go:build !leanclient

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/wit"
)

// componentCapsule writes a capsule directory around the component at
// wasmFile, pinned.
func componentCapsule(t *testing.T, name, wasmFile string) string {
	t.Helper()
	b, err := os.ReadFile(wasmFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	m := fmt.Sprintf("[capsule]\nname = %q\nversion = \"0.1.0\"\nmodule = %q\nsha256 = %q\n\n[imports]\n\"capsule:process\" = \"1.1\"\n\n"+
		"[capabilities]\nexec = [\"/bin/sh\"]\nallow_persistent = true\nbackend = \"local\"\n", name, name+".wasm", hex.EncodeToString(sum[:]))
	if err := os.WriteFile(filepath.Join(dir, "Capsule.toml"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// socketsWorld is a `capsule-host wit --out` directory plus a world
// that also imports wasi:sockets, which the host does not serve.
func socketsWorld(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wit")
	if _, err := wit.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "deps", "sockets"), 0o755); err != nil {
		t.Fatal(err)
	}
	tcp := "package wasi:sockets@0.2.3;\n\ninterface tcp {\n  connect: func(port: u16) -> u32;\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "deps", "sockets", "tcp.wit"), []byte(tcp), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "guest.wit"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\nworld sockets {\n    import capsule:process/host@1.1.0;\n    import wasi:sockets/tcp@0.2.3;\n    export tool;\n}\n"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// validate on component binaries: the C capsule (clang + jco, the
// README's recipe) shows its world, both halves, and its tools, and
// alone (validate FILE.wasm) its world; a
// component importing an interface the host does not serve is refused
// with the typed class "unsupported", naming the interface, with its
// exports still listed; a truncated component is "malformed".
func TestValidateComponent(t *testing.T) {
	ccap := componentCapsule(t, "ccap", componenttest.BuildC(t, filepath.Join(componenttest.Dir(), "..", "ccap", "capsule.c"), "capsule:guest/capsule"))
	out, errOut, code := runCLI(t, "", "validate", ccap)
	for _, want := range []string{"(component, sha256", "IMPORT INTERFACE", "capsule:process/host@1.1.0  4", "EXPORT",
		"capsule:guest/tool@1.0.0  describe, call  called by the host", "tools    echo, persist", "ok: "} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Fatalf("validate ccap: exit %d, want %q in\n%s\n%s", code, want, out, errOut)
		}
	}

	// The binary alone, no manifest: its world only.
	out, errOut, code = runCLI(t, "", "validate", filepath.Join(ccap, "ccap.wasm"))
	if code != exitOK || !strings.Contains(out, "capsule:guest/tool@1.0.0  describe, call") || !strings.Contains(out, "a component alone") {
		t.Fatalf("validate ccap.wasm: exit %d\n%s\n%s", code, out, errOut)
	}

	sockWasm := componenttest.Dummy(t, socketsWorld(t), "capsule:guest/sockets")
	out, errOut, code = runCLI(t, "", "validate", sockWasm)
	if code != exitFailed || !strings.HasPrefix(errOut, sockWasm+": ") || !strings.Contains(errOut, `import "wasi:sockets/tcp@0.2.3"`) {
		t.Fatalf("validate dummy.wasm: exit %d\n%s\n%s", code, out, errOut)
	}
	sock := componentCapsule(t, "sock", sockWasm)
	out, errOut, code = runCLI(t, "", "validate", sock, "--json")
	var rep validateReport
	if code != exitFailed || json.Unmarshal([]byte(out), &rep) != nil || rep.OK || rep.Kind != "component" {
		t.Fatalf("validate sock: exit %d\n%s\n%s", code, out, errOut)
	}
	classes := map[string]string{}
	for _, g := range rep.Imports {
		classes[g.Module] = g.Error
	}
	if len(classes) != 2 || classes["capsule:process/host@1.1.0"] != "" || classes["wasi:sockets/tcp@0.2.3"] != "unsupported" {
		t.Fatalf("imports %+v", rep.Imports)
	}
	if len(rep.Exports) != 1 || rep.Exports[0].Name != "capsule:guest/tool@1.0.0" || len(rep.Problems) != 1 ||
		!strings.Contains(rep.Problems[0], `import "wasi:sockets/tcp@0.2.3"`) || !strings.Contains(rep.Problems[0], "capsule-host wit --out") {
		t.Fatalf("exports %+v problems %q", rep.Exports, rep.Problems)
	}

	// A truncated component: the same pin, so only the binary is wrong.
	wasm := filepath.Join(sock, "sock.wasm")
	b, _ := os.ReadFile(wasm)
	if err := os.WriteFile(wasm, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, "", "pin", sock); code != exitOK {
		t.Fatalf("pin: exit %d %s", code, errOut)
	}
	out, errOut, code = runCLI(t, "", "validate", sock, "--json")
	rep = validateReport{}
	if code != exitFailed || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "malformed component binary") {
		t.Fatalf("validate truncated: exit %d\n%s\n%s", code, out, errOut)
	}
}

package component_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/host/process"
)

// dummyCapsule is wit-component's dummy component for the world
// capsule:guest/capsule of the repo's wit/ (jco componentEmbed --dummy,
// componentNew): a real binary whose import types are the WIT's.
// TestDummyFixtureFresh rebuilds it.
const dummyCapsule = "testdata/wit/dummy-capsule.wasm"

func TestDummyFixtureFresh(t *testing.T) {
	want, err := os.ReadFile(dummyCapsule)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(componenttest.Dummy(t, filepath.Join(componenttest.Root(), "wit"), "capsule:guest/capsule"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: rebuild it with `node build.mjs ../../../../wit capsule:guest/capsule - ../wit/dummy-capsule.wasm --dummy` in host/component/testdata/build", dummyCapsule)
	}
}

// The real component's import of capsule:process/host@1.1.0 declares
// every function of the WIT, each with the host's type.
func TestCheckWITReal(t *testing.T) {
	c := parseFile(t, dummyCapsule)
	it := importType(t, c, process.Module11)
	var funcs int
	for _, ex := range it.Exports {
		if ex.Sort == component.SortFunc {
			funcs++
		}
	}
	if want := len(process.Signatures()[process.Module11]) - 1; funcs != want { // all but [resource-drop]
		t.Fatalf("the import type declares %d functions, the host's WIT has %d", funcs, want)
	}
	if err := component.CheckWIT(c, process.Served(), process.Signatures()); err != nil {
		t.Fatal(err)
	}
	// The type is decoded, not only counted.
	spawn := it.Export("spawn")
	if got := spawn.Type.Describe(); !strings.HasPrefix(got, "func(request: record {cmd: string, args: list<string>, stdin: option<list<u8>>") {
		t.Fatalf("spawn = %s", got)
	}
}

// A component built against a WIT that differs from the host's in one
// place is refused at load, naming the interface, the function and what
// differs at the WIT level, even where the flattened core signature is
// the same (field and case names, enum labels, payloads in the return
// area).
func TestCheckWITMismatch(t *testing.T) {
	tests := []struct {
		name, old, new string
		fn, path       string // the function and a part of the path
		host, comp     string // each side, as reported
	}{
		{"record field renamed", "cmd: string,", "command: string,", "", "record spawn-request field 0's name", "cmd", "command"},
		{"variant case removed", "torn-write(u64),", "", "", "variant error-code", "14 cases", "13 cases"},
		{"enum case added", "stop, cont, kill }", "stop, cont, kill, winch }", "", "enum process-signal", "kill}", "winch}"},
		{"param type changed", "wait: func(id: process-id, timeout-ms: u64)", "wait: func(id: process-id, timeout-ms: u32)", "wait", "param timeout-ms", "u64", "u32"},
		{"param added", "release: func(id: process-id)", "release: func(id: process-id, force: bool)", "release", "the parameter list", "1 parameters (id)", "2 parameters (id, force)"},
		{"param renamed", "status: func(id: process-id)", "status: func(pid: process-id)", "status", "parameter 0's name", "id", "pid"},
		{"result type changed", "os-pid: func() -> result<u32, error-code>;", "os-pid: func() -> result<u64, error-code>;", "[method]process-handle.os-pid", "the result > result ok", "u32", "u64"},
		{"option dropped", "cwd: option<string>,", "cwd: string,", "", "record spawn-request field cwd", "option<string>", "string"},
		{"record field type", "age-ms: u64,", "age-ms: u32,", "", "record process-info field age-ms", "u64", "u32"},
		{"variant payload", "log-ready(log-stream),", "log-ready(string),", "poll-events", "variant event-kind case log-ready", "log-stream", "string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := parseFile(t, componenttest.Dummy(t, mutatedWIT(t, tc.old, tc.new), "capsule:guest/capsule"))
			err := component.CheckWIT(c, process.Served(), process.Signatures())
			var m *component.WITMismatch
			if !errors.As(err, &m) || !errors.Is(err, component.ErrMismatch) {
				t.Fatalf("CheckWIT = %v, want a *WITMismatch", err)
			}
			if m.Interface != process.Module11 || m.Served != process.Module11 || (tc.fn != "" && m.Func != tc.fn) ||
				!strings.Contains(m.Path, tc.path) || !strings.Contains(m.Host, tc.host) || !strings.Contains(m.Component, tc.comp) {
				t.Fatalf("mismatch %+v\nwant func %q, path ~%q, host ~%q, component ~%q", m, tc.fn, tc.path, tc.host, tc.comp)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), m.Func) || !strings.Contains(err.Error(), process.Module11) {
				t.Fatalf("message names neither function nor interface: %v", err)
			}
		})
	}
	t.Run("function the host lacks", func(t *testing.T) {
		t.Parallel()
		c := parseFile(t, componenttest.Dummy(t, mutatedWIT(t, "    spawn: func(", "    frobnicate: func(n: u32);\n    spawn: func("), "capsule:guest/capsule"))
		err := component.CheckWIT(c, process.Served(), process.Signatures())
		var e *component.Error
		if !errors.As(err, &e) || !errors.Is(err, component.ErrUnsupported) || !strings.Contains(e.Construct, `"frobnicate"`) {
			t.Fatalf("CheckWIT = %v, want ErrUnsupported naming frobnicate", err)
		}
	})
}

// mutatedWIT copies the repo's wit/ with one replacement in
// process@1.1.0/host.wit, which must apply exactly once.
func mutatedWIT(t *testing.T, old, new string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(componenttest.Root(), "wit")
	for _, pkg := range []string{"guest@1.0.0", "process@1.0.0", "process@1.1.0"} {
		files, _ := filepath.Glob(filepath.Join(src, pkg, "*.wit"))
		if err := os.MkdirAll(filepath.Join(dir, pkg), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			if pkg == "process@1.1.0" {
				if n := strings.Count(text, old); n != 1 {
					t.Fatalf("%q occurs %d times in %s", old, n, f)
				}
				text = strings.Replace(text, old, new, 1)
			}
			if err := os.WriteFile(filepath.Join(dir, pkg, filepath.Base(f)), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func parseFile(t testing.TB, path string) *component.Component {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := component.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func importType(t *testing.T, c *component.Component, name string) *component.Type {
	t.Helper()
	for _, im := range c.Imports {
		if im.Name == name && im.Sort == component.SortInstance {
			return c.TypeSpace[im.Type]
		}
	}
	t.Fatalf("no import %q", name)
	return nil
}

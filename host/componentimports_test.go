package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
)

// ComponentImports (validate's view of a component) resolves each
// imported interface and runs the WIT-level check, on a real
// wit-component binary.
func TestComponentImports(t *testing.T) {
	b, err := os.ReadFile("component/testdata/wit/dummy-capsule.wasm")
	if err != nil {
		t.Fatal(err)
	}
	ims, err := host.ComponentImports(b)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]host.ComponentImport{}
	for _, im := range ims {
		got[im.Name] = im
	}
	// World capsule:guest/capsule imports 1.1.0 only.
	const name = "capsule:process/host@1.1.0"
	if im := got[name]; len(ims) != 1 || im.Served != name || im.Err != nil || im.Functions < 20 {
		t.Errorf("imports %+v", ims)
	}
	if _, err := host.ComponentImports(b[:len(b)/2]); !errors.Is(err, component.ErrMalformed) {
		t.Errorf("truncated: %v", err)
	}
}

// Host.Load refuses a component built against a WIT that differs from
// the host's with the typed *component.WITMismatch, before anything is
// compiled or instantiated.
func TestLoadWITMismatch(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(componenttest.Root(), "wit")
	for _, pkg := range []string{"guest@1.0.0", "process@1.0.0", "process@1.1.0"} {
		b, err := os.ReadFile(filepath.Join(src, pkg, map[bool]string{true: "guest.wit", false: "host.wit"}[pkg == "guest@1.0.0"]))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if pkg == "process@1.1.0" {
			text = strings.Replace(text, "keep-stdin-open: bool,", "keep-stdin: bool,", 1)
		}
		if err := os.MkdirAll(filepath.Join(dir, pkg), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pkg, "x.wit"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	comp := componenttest.Dummy(t, dir, "capsule:guest/capsule")
	e := newHost(t, nil)
	_, err := e.h.Load(context.Background(), capsuleDir(t, "mismatch", comp, jscapManifest))
	var m *component.WITMismatch
	if !errors.As(err, &m) || m.Func != "spawn-persistent" || m.Host != "keep-stdin-open" || m.Component != "keep-stdin" {
		t.Fatalf("Load = %v, want a *WITMismatch on spawn-persistent's persist-options", err)
	}
}

package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
)

// Components run (TestJSLoad), but a Go wasip1 reactor wrapped
// with the preview1 adapter and without goadapt's cabi_realloc_adapter
// cannot run anywhere (component/gorealloc.go; TestGoComponent is the
// case with it): it is refused at Load with a typed *component.Error
// saying why and what to do, before any instance traps, never the
// engine's "invalid version header"; the host keeps serving.
func TestLoadComponentRefused(t *testing.T) {
	e := newHost(t, nil)
	core := filepath.Join(componenttest.Root(), "capsules", "testcap", "testcap.wasm")
	comp := componenttest.Wrap(t, core, "capsule:guest/capsule")
	_, err := e.h.Load(context.Background(), capsuleDir(t, "comp", comp, "[imports]\n\"capsule:process\" = \"1.1\"\n"))
	var ce *component.Error
	if refusedByEngine(t, err) {
		return
	}
	if !errors.Is(err, component.ErrUnsupported) || !errors.As(err, &ce) || !strings.HasPrefix(ce.Construct, "a Go (gc) wasip1 reactor") {
		t.Fatalf("err = %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `capsule "comp": guest.wasm: `) || strings.Contains(msg, "version header") || !strings.Contains(msg, "Capsule.toml's module") || !strings.Contains(msg, "goadapt") {
		t.Fatalf("message %q", msg)
	}
	// The same host still loads and runs a core module.
	c := load(t, e, "core", "")
	if len(c.Tools()) == 0 {
		t.Fatal("core capsule described no tools")
	}
}

// A malformed component is refused by the parser, with its offset.
func TestLoadMalformedComponent(t *testing.T) {
	e := newHost(t, nil)
	bin := filepath.Join(t.TempDir(), "bad.wasm")
	// preamble, then a core module section claiming 100 bytes it lacks
	if err := os.WriteFile(bin, []byte("\x00asm\x0d\x00\x01\x00\x01\x64\x00asm"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := e.h.Load(context.Background(), capsuleDir(t, "bad", bin, ""))
	var ce *component.Error
	if !errors.Is(err, component.ErrMalformed) || !errors.As(err, &ce) || ce.Section != "core module" || ce.Offset != 8 {
		t.Fatalf("err = %v", err)
	}
}

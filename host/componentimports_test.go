package host_test

import (
	"errors"
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component"
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

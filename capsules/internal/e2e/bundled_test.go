package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBundledCapsulesLoad loads every capsule of capsules/ on its own
// host, two at a time: each compiles (or comes from the module cache),
// links against the contract it declares and lists its tools. It runs
// first (file order), so later tests find the modules compiled; make test
// also runs it alone, without -race, to warm the race leg's cache
// (Makefile: race-cache).
func TestBundledCapsulesLoad(t *testing.T) {
	ents, err := os.ReadDir(capsulesDir(t))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(capsulesDir(t), e.Name(), "Capsule.toml")); err != nil {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) {
			t.Parallel()
			h := newHost(t, e.Name())
			c, ok := h.Capsule(e.Name())
			if !ok {
				t.Fatalf("capsule %s loaded but not served under its directory's name", e.Name())
			}
			if len(c.Tools()) == 0 {
				t.Fatalf("capsule %s lists no tools", e.Name())
			}
		})
	}
	if n < 5 {
		t.Fatalf("found %d capsules in %s, want the 5 bundled ones", n, capsulesDir(t))
	}
}

package e2e

import (
	"os"
	"testing"
)

// cacheDir is the compiled-module cache shared by every Host in this test
// binary, so each capsule is compiled once per run, not once per test
// (wasmtime compiles a Go guest in 1–5 s here; see docs/rfc/engines.md).
var cacheDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "e2e-module-cache-")
	if err != nil {
		panic(err)
	}
	cacheDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

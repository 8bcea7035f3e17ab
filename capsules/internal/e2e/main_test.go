package e2e

import (
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

// cacheDir is the compiled-module cache shared by every Host in this test
// binary, so each capsule is compiled once per run, not once per test
// (wasmtime compiles a Go guest in 1–5 s here; see RFC.md §5).
var cacheDir string

func TestMain(m *testing.M) { os.Exit(testutil.RunWithTempDir(m, "e2e-module-cache-", &cacheDir)) }

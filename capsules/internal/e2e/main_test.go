package e2e

import (
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// cacheDir is the compiled-module cache shared by every Host in this test
// binary, so each capsule is compiled once per run, not once per test
// (wasmtime compiles a Go guest in 1–5 s here; see RFC.md §5).
var cacheDir string

func TestMain(m *testing.M) { os.Exit(testutil.RunWithTempDir(m, "e2e-module-cache-", &cacheDir)) }

// moduleCache is the compile cache of every Host here: the engine's part
// of $CAPSULE_HOST_CACHE_DIR when set, else cacheDir. make test warms one
// for its race leg: a Go guest compiled by the race-instrumented wazero
// takes about 40 s, and the detector watches the host, not the compiler.
func moduleCache() string {
	if d := host.EnvCacheDir(enginetest.HostEngine()); d != "" {
		return d
	}
	return cacheDir
}

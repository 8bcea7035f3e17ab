//go:build !leanclient

package main

import (
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// TestMain lets the backends re-execute this test binary as their helpers
// (a helper exits in reexec.Init). Every daemon the tests start,
// in-process or as a child (which inherits the environment), shares one
// compile cache, so each bundled capsule is compiled once per run, not
// once per daemon; a $CAPSULE_HOST_CACHE_DIR set by the caller (kept
// across runs) wins.
func TestMain(m *testing.M) {
	reexec.Init()
	if os.Getenv(daemon.CacheEnv) != "" {
		os.Exit(testutil.Main(m))
	}
	dir, err := os.MkdirTemp("", "capsule-host-cmd-cache-")
	if err != nil {
		panic(err)
	}
	os.Setenv(daemon.CacheEnv, dir)
	code := testutil.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

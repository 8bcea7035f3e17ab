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
	var err error
	if binDir, err = os.MkdirTemp("", "capsule-host-bin-"); err != nil {
		panic(err)
	}
	code := runWithCache(m)
	os.RemoveAll(binDir)
	os.Exit(code)
}

// binDir holds the binaries the tests build (builtBinary); TestMain
// removes it at exit, so no run leaves a 40 MB binary in /tmp.
var binDir string

func runWithCache(m *testing.M) int {
	if os.Getenv(daemon.CacheEnv) != "" {
		return testutil.Main(m)
	}
	dir, err := os.MkdirTemp("", "capsule-host-cmd-cache-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	os.Setenv(daemon.CacheEnv, dir)
	return testutil.Main(m)
}

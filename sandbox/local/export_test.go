package local

import (
	"testing"

	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// SweepStale exposes the stale-host sweep (run once per process by New).
var SweepStale = sweepStale

// HelperArg0 is the exec helper's reexec role name.
const HelperArg0 = helperArg0

// PoolGroupPrefix begins the names of this process's pooled cgroups.
func PoolGroupPrefix() string { return hostTag + "-pool" }

// CHelper says whether this build has the C exec helper (helper_cgo.go).
const CHelper = cHelper

// goHelperRole runs the Go exec helper even where the C one would take
// the helper's role (UseGoHelper).
const goHelperRole = helperArg0 + "-go"

func init() { reexec.Register(goHelperRole, helperMain) }

// UseGoHelper makes this test's spawns use the Go exec helper.
func UseGoHelper(t testing.TB) {
	helperRole = goHelperRole
	t.Cleanup(func() { helperRole = helperArg0 })
}

// SetGoHelper switches the exec helper for benchmarks that interleave
// both (BenchmarkExecHelper).
func SetGoHelper(on bool) {
	helperRole = helperArg0
	if on {
		helperRole = goHelperRole
	}
}

package registry

import (
	"os"
	"strings"
	"syscall"
)

// crashPoints are the steps of a spawn at which this process kills
// itself with SIGKILL, named in CAPSULE_HOST_TEST_CRASH_POINTS (comma
// separated; read once at start). It is the test hook of issue 11's
// crash-point test: a randomly timed kill reaches the short steps only by
// luck, so TestCrashPoints (cmd/capsule-host) names each step in turn,
// kills serve exactly there, and checks the restart leaves no orphan, no
// dangling entry and exact quotas. Unset, as in every real run, the check
// is one map lookup on an empty map.
var crashPoints = parseCrashPoints(os.Getenv("CAPSULE_HOST_TEST_CRASH_POINTS"))

// The steps of a persistent spawn, in order (RFC §16 says what a crash at
// each leaves behind).
const (
	crashReserved  = "spawn-reserved"  // quota reserved, nothing started
	crashStarted   = "spawn-started"   // the backend runs the process; not journaled
	crashJournaled = "spawn-journaled" // journaled; not yet in the registry's maps
	crashPublished = "spawn-published" // published; the ID not yet returned
)

// CrashPoints lists the step names CAPSULE_HOST_TEST_CRASH_POINTS accepts.
func CrashPoints() []string {
	return []string{crashReserved, crashStarted, crashJournaled, crashPublished}
}

func parseCrashPoints(s string) map[string]bool {
	m := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			m[p] = true
		}
	}
	return m
}

// crashAt kills this process at step when the hook names it.
func crashAt(step string) {
	if crashPoints[step] {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is delivered before this returns to the caller
	}
}

package registry

import "testing"

// The names are the WIT enums' (wit/process@1.1.0/host.wit), in order;
// the daemon's JSON carries them byte for byte.
func TestPhaseReasonNames(t *testing.T) {
	for p, want := range map[Phase]string{PhaseStarting: "starting", PhaseRunning: "running", PhaseExited: "exited", -1: "unknown", PhaseExited + 1: "unknown"} {
		if got := p.String(); got != want {
			t.Errorf("Phase(%d) = %q, want %q", int(p), got, want)
		}
	}
	for r, want := range map[Reason]string{ReasonSelfExit: "self-exit", ReasonStopped: "stopped", ReasonKilled: "killed",
		ReasonLifetime: "lifetime", ReasonIdle: "idle", ReasonEvicted: "evicted", ReasonRemoved: "removed", -1: "unknown", ReasonRemoved + 1: "unknown"} {
		if got := r.String(); got != want {
			t.Errorf("Reason(%d) = %q, want %q", int(r), got, want)
		}
	}
}

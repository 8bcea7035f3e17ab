package registry

// The WIT names of Phase and Reason (process-phase, exit-reason), the
// one table the daemon's JSON and the registry's log both read.

var (
	phaseNames  = [...]string{PhaseStarting: "starting", PhaseRunning: "running", PhaseExited: "exited"}
	reasonNames = [...]string{ReasonSelfExit: "self-exit", ReasonStopped: "stopped", ReasonKilled: "killed",
		ReasonLifetime: "lifetime", ReasonIdle: "idle", ReasonEvicted: "evicted", ReasonRemoved: "removed"}
)

// String is the phase's WIT name ("starting", "running", "exited"), or
// "unknown" for a value that is none of them.
func (p Phase) String() string { return name(phaseNames[:], int(p)) }

// String is the reason's WIT name ("self-exit", "stopped", ...), or
// "unknown" for a value that is none of them.
func (r Reason) String() string { return name(reasonNames[:], int(r)) }

func name(names []string, i int) string {
	if i < 0 || i >= len(names) {
		return "unknown"
	}
	return names[i]
}

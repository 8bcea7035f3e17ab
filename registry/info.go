package registry

import (
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

// TerminalInfo mirrors the WIT terminal-info: the PTY's size now.
type TerminalInfo struct {
	Rows, Cols uint16
	Term       string
}

// infoTerminal fills the 1.2.0 terminal field: the terminal's size now.
func infoTerminal(p *proc, in *Info) {
	if ts := p.term; ts != nil {
		ts.mu.Lock()
		sz := ts.size
		ts.mu.Unlock()
		in.Terminal = &sz
	}
}

// sampleInput fills waiting-for-input (nil once exited, or when /proc
// cannot tell: procfs.InputWait). Only the one-process views (Status,
// OperatorStatus) sample it: a sample reads /proc four or more times,
// and a session leader's scans every /proc/<pid>/stat, so a list of 500
// processes that sampled each took 54 s on the 2-core machine; lists and
// status-many leave it nil ("cannot tell").
func sampleInput(in *Info) {
	if in.Phase != PhaseRunning || in.OSPid == nil {
		return
	}
	if ok, err := procfs.InputWait(int(*in.OSPid)); err == nil {
		in.WaitingForInput = &ok
	}
}

// reapDeadlineLocked is when the reaper's sweep will end the running p,
// from now, and by which rule: max lifetime for every process, the idle
// timeout for persistent ones (an owner call restarts it), whichever
// comes first. The sweep runs periodically, so the reap happens at most
// one sweep interval after the deadline.
func (r *Registry) reapDeadlineLocked(p *proc) (*time.Duration, *Reason) {
	now := r.now()
	left, rule := p.maxLifetime-now.Sub(p.started), ReasonLifetime
	if p.persistent {
		if idle := p.idle - now.Sub(p.lastTouch); idle < left {
			left, rule = idle, ReasonIdle
		}
	}
	left = max(0, left)
	return &left, &rule
}

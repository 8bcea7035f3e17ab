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

// infoTerminal fills the 1.2.0 fields that read the terminal and /proc:
// the terminal's size, and whether the process waits for input (nil once
// exited, or when /proc cannot tell: procfs.InputWait).
func (r *Registry) infoTerminal(p *proc, in *Info) {
	if ts := p.term; ts != nil {
		ts.mu.Lock()
		sz := ts.size
		ts.mu.Unlock()
		in.Terminal = &sz
	}
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

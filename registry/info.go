package registry

import (
	"sync"
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

// infoFanout bounds the snapshots a list takes at once through handles
// (backends that are no Snapshotter, an older keeper). A keeper-held
// process's snapshot that way is five round trips to its keeper (the two
// streams' retained and dropped figures, the stats), so 500 processes
// taken one after the other cost 2,500 round trips in a row: 0.6 s on
// the loaded 2-core machine. Taken 16 at a time they overlap on the
// keeper's connection, which answers requests in any order.
const infoFanout = 16

// fanout calls f(i) for every i < n, at most infoFanout at a time.
func fanout(n int, f func(i int)) {
	if n <= 2 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(infoFanout, n) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// infos snapshots ps in order, at most infoFanout at a time; snap takes
// the i-th.
func infos(ps []*proc, snap func(i int) Info) []Info {
	out := make([]Info, len(ps))
	fanout(len(ps), func(i int) { out[i] = snap(i) })
	return out
}

// brief is the operator's snapshot without the figures that ask the
// backend (OperatorFilter.Brief): identity, owner, phase, exit, age.
func (r *Registry) brief(p *proc) Info {
	r.syncExit(p)
	in := Info{ID: p.id, Label: p.label, Command: p.command, Phase: PhaseRunning, Capsule: p.own.capsule, Principal: p.own.principal}
	r.mu.Lock()
	in.Age, in.Idle = r.now().Sub(p.started), r.now().Sub(p.lastTouch)
	if p.exited {
		e, reason := p.exit, p.reason
		in.Phase, in.Exit, in.Reason = PhaseExited, &e, &reason
	}
	r.mu.Unlock()
	return in
}

package registry

import (
	"context"

	"syscall"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
)

// lost is the Handle of a journaled process that its backend no longer
// holds (its keeper died, or the backend is not configured any more): it
// has settled, its logs are empty and closed, and it accepts nothing. The
// registry keeps it until its exit retention ends so that its owner sees
// the exit instead of an ID that points nowhere.
type lost struct {
	ref  sandbox.Ref
	exit sandbox.Exit
	logs [2]*sandbox.OutputLog
}

var settled = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// lostHandle stands for ref; ex is the journaled exit, if it was known.
func lostHandle(ref sandbox.Ref, ex *journal.Exit) sandbox.Handle {
	h := &lost{ref: ref, exit: sandbox.Exit{Lost: true, Code: -1}}
	if ex != nil {
		h.exit = sandbox.Exit{At: ex.At}
		if ex.Signal != nil {
			h.exit.Signal = syscall.Signal(*ex.Signal)
		} else if ex.Code != nil {
			h.exit.Code = int(*ex.Code)
		}
	}
	for i := range h.logs {
		l, err := sandbox.NewOutputLog(sandbox.OutputLogConfig{RingBytes: 1, Overflow: sandbox.DropOldest})
		if err != nil {
			panic(err) // a constant valid config: never
		}
		l.CloseWrite()
		h.logs[i] = l
	}
	return h
}

func (h *lost) Ref() sandbox.Ref                           { return h.ref }
func (h *lost) PID() int                                   { return 0 }
func (h *lost) Stdin() sandbox.StdinPipe                   { return nil }
func (h *lost) Stdout() sandbox.Log                        { return h.logs[0] }
func (h *lost) Stderr() sandbox.Log                        { return h.logs[1] }
func (h *lost) Done() <-chan struct{}                      { return settled }
func (h *lost) Signal(syscall.Signal) error                { return nil }
func (h *lost) Stats() sandbox.Stats                       { return sandbox.Stats{} }
func (h *lost) Release() error                             { return nil }
func (h *lost) Wait(context.Context) (sandbox.Exit, error) { return h.exit, nil }
func (h *lost) Terminate(context.Context, sandbox.TerminateMode) (sandbox.Exit, error) {
	return h.exit, nil
}

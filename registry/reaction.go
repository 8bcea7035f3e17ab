package registry

import (
	"context"
	"time"
)

// Send-and-screen (capsule-host send --screen): one operator request
// writes input and returns the screen once the program reacted to it, so
// a keystroke to its echo costs one client start-up, not two (RFC,
// "Benchmarks of the terminal tier").

// Reaction says how the wait for a program's reaction to input ended.
type Reaction int

const (
	// ReactedOutput: the process printed after the input was written and
	// the screen rendered all output logged when that was seen.
	ReactedOutput Reaction = iota
	// ReactedQuiet: no output came within the settle time after the
	// write (a program that echoes nothing), or the output ended.
	ReactedQuiet
	// ReactedTimeout: the bound passed first (the screen was still
	// rendering output); the screen is as it was then.
	ReactedTimeout
)

// InputMark is the stdout offset before an input, from which its
// reaction is awaited.
type InputMark struct{ off int64 }

// OperatorMarkInput marks a terminal's output just before input is
// written: output logged after the mark is the reaction. A process
// without a terminal is ErrInvalidInput, as for OperatorSendKeys.
func (r *Registry) OperatorMarkInput(id string) (InputMark, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return InputMark{}, err
	}
	_, ts, err := hasTerminal(p)
	if err != nil {
		return InputMark{}, err
	}
	return InputMark{off: ts.log.End()}, nil
}

// OperatorAwaitReaction waits until the terminal printed something after
// m and the screen rendered it (ReactedOutput), or settle passed with no
// output after m (ReactedQuiet), or bound passed (ReactedTimeout; capped
// by WaitCap), and returns the screen then. Any output counts: it does
// not wait for the program to finish drawing, and a program that prints
// on its own reacts at once. Neither quiet nor the bound is an error.
func (r *Registry) OperatorAwaitReaction(ctx context.Context, id string, m InputMark, settle, bound time.Duration) (Screen, Reaction, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return Screen{}, 0, err
	}
	_, ts, err := hasTerminal(p)
	if err != nil {
		return Screen{}, 0, err
	}
	bctx, cancel := context.WithTimeout(ctx, max0(min(bound, r.cfg.Defaults.WaitCap)))
	defer cancel()
	how := awaitOutput(bctx, ts, m.off, max0(settle))
	s := r.snapshot(bctx, p, ts, 0)
	if how == ReactedOutput && s.Behind > 0 {
		how = ReactedTimeout
	}
	return s, how, nil
}

// awaitOutput waits for the log to grow past off: ReactedOutput, or
// ReactedQuiet when settle passes first or the log is closed, or
// ReactedTimeout when ctx ends.
func awaitOutput(ctx context.Context, ts *termState, off int64, settle time.Duration) Reaction {
	t := time.NewTimer(settle)
	defer t.Stop()
	for {
		ch := ts.log.Changed() // arm, then read: no lost wake-up
		switch {
		case ts.log.End() > off:
			return ReactedOutput
		case ts.log.Closed():
			return ReactedQuiet
		}
		select {
		case <-ch:
		case <-t.C:
			return ReactedQuiet
		case <-ctx.Done():
			return ReactedTimeout
		}
	}
}

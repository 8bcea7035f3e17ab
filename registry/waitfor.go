package registry

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
)

// WaitKind names a wait-for condition, and which one fired.
type WaitKind int

const (
	// WaitOutput: output from a cursor matches a regular expression.
	WaitOutput WaitKind = iota
	// WaitQuiet: a stretch with no output on either stream.
	WaitQuiet
	// WaitInput: the process is blocked reading its input.
	WaitInput
	// WaitExit: the process exited.
	WaitExit
)

// WaitCondition mirrors the WIT wait-condition.
type WaitCondition struct {
	Kind   WaitKind
	Stream Stream        // WaitOutput
	Cursor *string       // WaitOutput: a read-since cursor; nil: from now
	Regex  string        // WaitOutput: RE2 syntax (Go regexp)
	Quiet  time.Duration // WaitQuiet
}

// WaitResult mirrors the WIT wait-for-result. Cursor is a read-since
// cursor: just after the match for WaitOutput, else stdout's end when the
// condition fired (a terminal's output is all on stdout).
type WaitResult struct {
	Fired  WaitKind
	Cursor string
}

const (
	// MaxWaitRegex bounds the expression's length (compile cost).
	MaxWaitRegex = 4096
	// waitMatchOverlap is how much already-scanned output a later scan
	// keeps in front of new output, so a match can span two reads; a
	// match longer than this that spans a read is not seen.
	waitMatchOverlap = 4096
	// waitReadBatch is one read of the log while matching.
	waitReadBatch = 64 << 10
	// inputPoll is how often input-wait samples /proc.
	inputPoll = 50 * time.Millisecond
)

// WaitFor blocks until cond holds, timeout passes (capped by WaitCap:
// ErrWaitTimeout) or ctx ends. It works for pipe and terminal processes.
// A condition that can no longer hold (the output ended without a match,
// input-wait after the exit) is ErrClosed. The wait does not acknowledge
// output of a backpressure process: it reads, it does not consume.
func (r *Registry) WaitFor(ctx context.Context, id string, cond WaitCondition, timeout time.Duration) (WaitResult, error) {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		return WaitResult{}, err
	}
	return r.waitFor(ctx, p, cond, timeout)
}

func (r *Registry) waitFor(ctx context.Context, p *proc, cond WaitCondition, timeout time.Duration) (WaitResult, error) {
	var err error
	var re *regexp.Regexp
	if cond.Kind == WaitOutput {
		if re, err = compileWait(cond.Regex); err != nil {
			return WaitResult{}, err
		}
	}
	// The bound is a deadline on ctx: ctxErr then says wait-timeout.
	ctx, cancel := context.WithTimeout(ctx, max0(min(timeout, r.cfg.Defaults.WaitCap)))
	defer cancel()
	switch cond.Kind {
	case WaitOutput:
		return r.waitOutput(ctx, p, cond, re)
	case WaitQuiet:
		return r.waitQuiet(ctx, p, cond.Quiet)
	case WaitInput:
		return r.waitInput(ctx, p)
	case WaitExit:
		return r.waitExit(ctx, p)
	}
	return WaitResult{}, fmt.Errorf("%w: wait-for: unknown condition %d", ErrInvalidInput, cond.Kind)
}

func compileWait(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxWaitRegex {
		return nil, fmt.Errorf("%w: wait-for: regex of %d bytes (max %d)", ErrInvalidInput, len(expr), MaxWaitRegex)
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			return nil, fmt.Errorf("%w: wait-for: invalid regex %q: %s %q", ErrInvalidInput, expr, se.Code, se.Expr)
		}
		return nil, fmt.Errorf("%w: wait-for: invalid regex %q", ErrInvalidInput, expr)
	}
	return re, nil
}

// waitEnd is the result of a condition other than an output match.
func (r *Registry) waitEnd(p *proc, k WaitKind) WaitResult {
	return WaitResult{Fired: k, Cursor: r.encodeCursor(p.key, Stdout, p.h.Stdout().End())}
}

// waitOutput scans the stream from the cursor, keeping the last
// waitMatchOverlap bytes scanned in front of new output; a match must end
// in new output (so one seen before is never reported twice).
func (r *Registry) waitOutput(ctx context.Context, p *proc, c WaitCondition, re *regexp.Regexp) (WaitResult, error) {
	if c.Stream != Stdout && c.Stream != Stderr {
		return WaitResult{}, fmt.Errorf("%w: wait-for: unknown stream %d", ErrInvalidInput, c.Stream)
	}
	l := p.log(c.Stream)
	off := l.End()
	if c.Cursor != nil {
		o, ok := r.decodeCursor(p.key, c.Stream, *c.Cursor)
		if !ok {
			return WaitResult{}, ErrNoSuchProcess
		}
		off = o
	}
	var tail []byte
	for {
		ch := l.Changed() // arm, then read: no lost wake-up
		ck, err := l.ReadFrom(off, waitReadBatch)
		if err != nil && !errors.Is(err, sandbox.ErrSpill) {
			return WaitResult{}, mapSandboxErr("wait-for", err)
		}
		if ck.Dropped > 0 {
			tail = nil // a gap: no match spans it
		}
		if len(ck.Data) > 0 {
			buf := append(tail, ck.Data...)
			if end, ok := matchEnd(re, buf, len(tail)); ok {
				at := ck.Next - int64(len(buf)-end)
				return WaitResult{Fired: WaitOutput, Cursor: r.encodeCursor(p.key, c.Stream, at)}, nil
			}
			tail = append([]byte(nil), buf[max(0, len(buf)-waitMatchOverlap):]...)
			off = ck.Next
			continue
		}
		if ck.EOF {
			return WaitResult{}, fmt.Errorf("%w: wait-for: the output ended without a match", ErrClosed)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return WaitResult{}, ctxErr(ctx, "wait-for")
		}
	}
}

// matchEnd returns the end of the first match of re in buf that ends
// after skip (the overlap already scanned).
func matchEnd(re *regexp.Regexp, buf []byte, skip int) (int, bool) {
	for _, loc := range re.FindAllIndex(buf, -1) {
		if loc[1] > skip || (skip == 0 && loc[1] == 0) {
			return loc[1], true
		}
	}
	return 0, false
}

// waitQuiet fires when quiet passes with neither stream growing; any
// output restarts the stretch.
func (r *Registry) waitQuiet(ctx context.Context, p *proc, quiet time.Duration) (WaitResult, error) {
	if quiet <= 0 {
		return WaitResult{}, fmt.Errorf("%w: wait-for: quiet-ms must be > 0", ErrInvalidInput)
	}
	out, errl := p.h.Stdout(), p.h.Stderr()
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		c1, c2 := out.Changed(), errl.Changed()
		seen := out.End() + errl.End()
		if out.Closed() && errl.Closed() {
			c1, c2 = nil, nil // no output can come: only the timer is left
		}
		select {
		case <-c1:
		case <-c2:
		case <-t.C:
			return r.waitEnd(p, WaitQuiet), nil
		case <-ctx.Done():
			return WaitResult{}, ctxErr(ctx, "wait-for")
		}
		if out.End()+errl.End() != seen {
			t.Reset(quiet)
		}
	}
}

// waitInput samples /proc (procfs.InputWait) every inputPoll.
func (r *Registry) waitInput(ctx context.Context, p *proc) (WaitResult, error) {
	tk := time.NewTicker(inputPoll)
	defer tk.Stop()
	for {
		select {
		case <-p.h.Done():
			return WaitResult{}, fmt.Errorf("%w: wait-for: the process exited", ErrClosed)
		default:
		}
		if pid := p.h.PID(); pid > 0 {
			if ok, _ := procfs.InputWait(pid); ok {
				return r.waitEnd(p, WaitInput), nil
			}
		}
		select {
		case <-tk.C:
		case <-p.h.Done():
		case <-ctx.Done():
			return WaitResult{}, ctxErr(ctx, "wait-for")
		}
	}
}

func (r *Registry) waitExit(ctx context.Context, p *proc) (WaitResult, error) {
	select {
	case <-p.h.Done():
		r.recordExit(p)
		return r.waitEnd(p, WaitExit), nil
	case <-ctx.Done():
		return WaitResult{}, ctxErr(ctx, "wait-for")
	}
}

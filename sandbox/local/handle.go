package local

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The sandbox.Handle methods of proc, and the Backend's cleanup of it.

// Ref implements sandbox.Handle.
func (p *proc) Ref() sandbox.Ref { return p.ref }

// PID implements sandbox.Handle.
func (p *proc) PID() int { return p.pid }

// Stdin implements sandbox.Handle.
func (p *proc) Stdin() sandbox.StdinPipe {
	if p.stdin == nil {
		return nil // never a typed nil in the interface
	}
	return p.stdin
}

// Stdout implements sandbox.Handle.
func (p *proc) Stdout() sandbox.Log { return p.stdout }

// Stderr implements sandbox.Handle.
func (p *proc) Stderr() sandbox.Log { return p.stderr }

// Done implements sandbox.Handle.
func (p *proc) Done() <-chan struct{} { return p.done }

var _ sandbox.AfterDoner = (*proc)(nil)

// AfterDone implements sandbox.AfterDoner: it calls f once the process has settled (Done is closed): on
// the settle goroutine, or on a goroutine of its own if it has settled
// already. A keeper of many processes then learns of every exit without
// a goroutine parked per process.
func (p *proc) AfterDone(f func()) {
	p.mu.Lock()
	if !p.hooksRan {
		p.afterDone = append(p.afterDone, f)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	go f()
}

// Wait implements sandbox.Handle.
func (p *proc) Wait(ctx context.Context) (sandbox.Exit, error) {
	select {
	case <-p.done:
		return p.exit, nil
	default:
	}
	select {
	case <-p.done:
		return p.exit, nil
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
}

// Signal implements sandbox.Handle.
func (p *proc) Signal(sig syscall.Signal) error {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.reaped {
		return nil
	}
	p.signalTree(sig)
	return nil
}

// Terminate implements sandbox.Handle.
func (p *proc) Terminate(ctx context.Context, mode sandbox.TerminateMode) (sandbox.Exit, error) {
	select {
	case <-p.done:
		return p.exit, nil
	default:
	}
	switch mode {
	case sandbox.Graceful:
		p.Signal(syscall.SIGTERM)
		t := time.NewTimer(p.spec.Grace)
		defer t.Stop()
		select {
		case <-p.done:
			return p.exit, nil
		case <-t.C:
			return sandbox.Exit{}, fmt.Errorf("process %s still running %v after SIGTERM: %w", p.ref.ID, p.spec.Grace, sandbox.ErrGracefulTimeout)
		case <-ctx.Done():
			return sandbox.Exit{}, ctx.Err()
		}
	case sandbox.Force:
		p.Signal(syscall.SIGKILL)
		return p.Wait(ctx)
	}
	return sandbox.Exit{}, fmt.Errorf("terminate mode %d: %w", mode, sandbox.ErrInvalidSpec)
}

// Stats implements sandbox.Handle: the cgroup's CPU time and memory peak
// where the group accounts them; nil otherwise.
func (p *proc) Stats() sandbox.Stats {
	select {
	case <-p.done:
		return p.stats
	default:
	}
	return p.groupStats()
}

// groupStats reads the group's CPU time (since this process got the
// group) and memory peak; none without a group.
func (p *proc) groupStats() sandbox.Stats {
	var s sandbox.Stats
	if p.group == nil {
		return s
	}
	if d, ok := p.group.CPUTime(); ok {
		d -= p.cpuBase
		s.CPUTime = &d
	}
	if m, ok := p.group.MemoryPeak(); ok {
		s.MemoryPeak = &m
	}
	return s
}

// Release implements sandbox.Handle.
func (p *proc) Release() error {
	select {
	case <-p.done:
	default:
		return fmt.Errorf("process %s is running with handle lifetime: %w", p.ref.ID, sandbox.ErrNotDetachable)
	}
	p.mu.Lock()
	p.released = true
	p.mu.Unlock()
	return nil
}

func (p *proc) isReleased() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released
}

// cleanup removes the logs' spill files and the spill directory, and
// retries a cgroup removal that failed while settling.
func (p *proc) cleanup() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cleaned {
		return nil
	}
	var errs []error
	for _, l := range []*sandbox.OutputLog{p.stdout, p.stderr} {
		if err := l.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.spillDir != nil {
		if err := p.spillDir.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.group != nil && !p.pooled {
		if err := p.group.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if p.settleErr != nil {
			err = fmt.Errorf("%w (while settling: %v)", err, p.settleErr)
		}
		return fmt.Errorf("cleanup %s: %w", p.ref.ID, err)
	}
	p.cleaned = true
	return nil
}

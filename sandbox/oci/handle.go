package oci

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// handle is one attachment to a container. Containers have backend
// lifetime, so Release always succeeds and never touches the container.
type handle struct {
	c        *container
	released atomic.Bool
}

var _ sandbox.Handle = (*handle)(nil)

func (h *handle) Ref() sandbox.Ref {
	return sandbox.Ref{Backend: h.c.b, ID: h.c.id, Lifetime: sandbox.LifetimeBackend}
}

// PID is the container init's host pid (advisory).
func (h *handle) PID() int { return h.c.st.InitPID }

func (h *handle) Stdin() sandbox.StdinPipe {
	if h.c.stdin == nil {
		return nil // never a typed nil in the interface
	}
	return h.c.stdin
}
func (h *handle) Stdout() sandbox.Log                            { return h.c.logs[0] }
func (h *handle) Stderr() sandbox.Log                            { return h.c.logs[1] }
func (h *handle) Done() <-chan struct{}                          { return h.c.done }
func (h *handle) Release() error                                 { h.released.Store(true); return nil }
func (h *handle) Wait(ctx context.Context) (sandbox.Exit, error) { return h.c.wait(ctx) }

func (c *container) wait(ctx context.Context) (sandbox.Exit, error) {
	select {
	case <-c.done:
		return c.exit, c.err
	default:
	}
	select {
	case <-c.done:
		return c.exit, c.err
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
}

func (c *container) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the container's init through the runtime. After
// exit it sends nothing.
func (h *handle) Signal(sig syscall.Signal) error {
	c := h.c
	if c.exited() {
		return nil
	}
	return c.kill(sig, false)
}

func (c *container) kill(sig syscall.Signal, all bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.st.runtime().kill(ctx, c.st.ContainerID, sig, all)
	if err == nil {
		return nil
	}
	// Raced with the exit: nothing was signalled, nothing needs to be.
	if errors.Is(err, errNotRunning) {
		select {
		case <-c.done:
			return nil
		case <-time.After(5 * time.Second):
		}
		if c.exited() {
			return nil
		}
	}
	return fmt.Errorf("oci signal %s: %w: %v", c.id, sandbox.ErrUnavailable, err)
}

// Terminate: Graceful sends SIGTERM to the container's init and waits up
// to the spec's grace, then gives ErrGracefulTimeout (never escalating).
// Force sends SIGKILL to every process of the container (runtime kill
// --all); the pid namespace dies with its init, so nothing escapes.
func (h *handle) Terminate(ctx context.Context, mode sandbox.TerminateMode) (sandbox.Exit, error) {
	c := h.c
	if c.exited() {
		return c.exit, c.err
	}
	switch mode {
	case sandbox.Graceful:
		if err := c.kill(syscall.SIGTERM, false); err != nil {
			return sandbox.Exit{}, err
		}
		t := time.NewTimer(c.grace)
		defer t.Stop()
		select {
		case <-c.done:
			return c.exit, c.err
		case <-t.C:
			return sandbox.Exit{}, fmt.Errorf("oci %s: still running %v after SIGTERM: %w", c.id, c.grace, sandbox.ErrGracefulTimeout)
		case <-ctx.Done():
			return sandbox.Exit{}, ctx.Err()
		}
	case sandbox.Force:
		if err := c.kill(syscall.SIGKILL, true); err != nil {
			return sandbox.Exit{}, err
		}
		return c.wait(ctx)
	}
	return sandbox.Exit{}, fmt.Errorf("%w: terminate mode %d", sandbox.ErrInvalidSpec, mode)
}

// Stats reads the container's cgroups while they exist, then what the
// monitor saved before deleting them.
func (h *handle) Stats() sandbox.Stats {
	var cs cgroupStats
	if err := readJSON(h.c.stateDir, statsName, &cs); err != nil {
		cs = cgroupStats{}
		var dirs []string
		_ = readJSON(h.c.stateDir, cgroupsName, &dirs)
		if ownedDirs(dirs, h.c.st.ContainerID) {
			u := cgroups.UsageIn(dirs)
			cs = cgroupStats{CPUNS: u.CPUNS, MemoryPeak: u.MemoryPeak}
		}
		// The monitor may have saved the final figures (and deleted the
		// cgroups) meanwhile: those win.
		var final cgroupStats
		if readJSON(h.c.stateDir, statsName, &final) == nil {
			cs = final
		}
	}
	var s sandbox.Stats
	if cs.CPUNS != nil {
		d := time.Duration(*cs.CPUNS)
		s.CPUTime = &d
	}
	if cs.MemoryPeak != nil && *cs.MemoryPeak > 0 {
		v := *cs.MemoryPeak
		s.MemoryPeak = &v
	}
	return s
}

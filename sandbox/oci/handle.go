package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
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

func (h *handle) Stdin() *sandbox.Stdin                          { return h.c.stdin }
func (h *handle) Stdout() *sandbox.OutputLog                     { return h.c.logs[0] }
func (h *handle) Stderr() *sandbox.OutputLog                     { return h.c.logs[1] }
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
	args := []string{"kill"}
	if all {
		args = append(args, "--all")
	}
	args = append(args, c.st.ContainerID, strconv.Itoa(int(sig)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := runtimeCmd(ctx, c.st, args...)
	if err == nil {
		return nil
	}
	// Raced with the exit: nothing was signalled, nothing needs to be.
	if errors.Is(err, errNoContainer) || strings.Contains(err.Error(), "not running") || strings.Contains(err.Error(), "stopped") {
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
	if b, err := os.ReadFile(filepath.Join(h.c.stateDir, "stats.json")); err == nil {
		_ = json.Unmarshal(b, &cs)
	} else {
		var dirs []string
		if b, err := os.ReadFile(filepath.Join(h.c.stateDir, "cgroups.json")); err == nil {
			_ = json.Unmarshal(b, &dirs)
		}
		if ownedDirs(dirs, h.c.st.ContainerID) {
			cs = readCgroupStats(dirs)
		}
		// The monitor may have saved the final figures (and deleted the
		// cgroups) meanwhile: those win.
		if b, err := os.ReadFile(filepath.Join(h.c.stateDir, "stats.json")); err == nil {
			cs = cgroupStats{}
			_ = json.Unmarshal(b, &cs)
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

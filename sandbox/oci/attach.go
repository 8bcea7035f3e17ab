package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
)

// lookupLive is the container this process started or attached, if any.
func lookupLive(sdir string) *container {
	live.Lock()
	defer live.Unlock()
	return live.m[sdir]
}

// Inspect implements sandbox.Backend.
func (b *Backend) Inspect(ctx context.Context, ref sandbox.Ref) (sandbox.Inspection, error) {
	if err := ctx.Err(); err != nil {
		return sandbox.Inspection{}, err
	}
	if err := b.checkRef(ref); err != nil {
		return sandbox.Inspection{Phase: sandbox.PhaseMissing}, nil
	}
	sdir := b.stateDir(ref.ID)
	if c := lookupLive(sdir); c != nil {
		select {
		case <-c.done:
			if c.err != nil {
				return sandbox.Inspection{}, c.err
			}
			return exited(c.exit), nil
		default:
			return sandbox.Inspection{Phase: sandbox.PhaseRunning}, nil
		}
	}
	return b.inspectDisk(ctx, sdir, ref.ID)
}

func exited(e sandbox.Exit) sandbox.Inspection {
	return sandbox.Inspection{Phase: sandbox.PhaseExited, Exit: &e}
}

// inspectDisk tells the phase from the state directory alone: the exit
// record if there is one, else the runtime's state and whether the
// monitor still runs.
func (b *Backend) inspectDisk(ctx context.Context, sdir, id string) (sandbox.Inspection, error) {
	if rec, err := readExit(sdir); err == nil {
		return exited(rec.exit()), nil
	}
	st, err := loadState(sdir)
	if errors.Is(err, fs.ErrNotExist) {
		return sandbox.Inspection{Phase: sandbox.PhaseMissing}, nil
	}
	if err != nil {
		return sandbox.Inspection{}, fmt.Errorf("oci inspect %s: %w: %w", id, sandbox.ErrUnavailable, err)
	}
	alive := monitorAlive(st)
	rs, err := st.runtime().state(ctx, st.ContainerID)
	// The monitor may have finished between our two reads.
	if rec, rerr := readExit(sdir); rerr == nil {
		return exited(rec.exit()), nil
	}
	switch {
	case errors.Is(err, errNoContainer):
		if alive {
			return sandbox.Inspection{Phase: sandbox.PhaseStarting}, nil
		}
		return sandbox.Inspection{Phase: sandbox.PhaseMissing}, nil
	case err != nil:
		return sandbox.Inspection{}, fmt.Errorf("oci inspect %s: %w: %w", id, sandbox.ErrUnavailable, err)
	case statusStarting(rs.Status):
		return sandbox.Inspection{Phase: sandbox.PhaseStarting}, nil
	case statusAlive(rs.Status):
		return sandbox.Inspection{Phase: sandbox.PhaseRunning}, nil
	case alive: // stopped, and the record is being written
		return sandbox.Inspection{Phase: sandbox.PhaseRunning}, nil
	}
	return sandbox.Inspection{}, fmt.Errorf("oci inspect %s: container stopped but its monitor died before recording the exit: %w", id, sandbox.ErrUnavailable)
}

// Attach implements sandbox.Backend.
func (b *Backend) Attach(ctx context.Context, ref sandbox.Ref) (sandbox.Handle, error) {
	if err := b.checkRef(ref); err != nil {
		return nil, err
	}
	sdir := b.stateDir(ref.ID)
	live.Lock()
	defer live.Unlock()
	if c := live.m[sdir]; c != nil {
		if c.cleaned {
			return nil, fmt.Errorf("process %s: %w", ref.ID, sandbox.ErrNotFound)
		}
		return &handle{c: c}, nil
	}
	st, err := loadState(sdir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("process %s: %w", ref.ID, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("oci attach %s: %w: %w", ref.ID, sandbox.ErrUnavailable, err)
	}
	if st.InitPID == 0 {
		st.InitPID, _ = readInitPID(sdir)
	}
	c := newContainer(b.name, st, sdir)
	// The streams died with the process that owned the pipes: give the
	// reader empty, closed logs rather than nil ones.
	for i := range c.logs {
		l, err := sandbox.NewOutputLog(sandbox.OutputLogConfig{RingBytes: 1, Overflow: sandbox.DropOldest})
		if err != nil {
			return nil, err
		}
		_ = l.CloseWrite()
		c.logs[i] = l
	}
	go c.settle(func() (*exitRecord, error) { return watchForeign(st, sdir) })
	live.m[sdir] = c
	return &handle{c: c}, nil
}

// watchForeign waits for the exit record of a container whose monitor is
// not our child: a pidfd on the monitor (start time checked), else
// polling the runtime's state.
func watchForeign(st stateFile, sdir string) (*exitRecord, error) {
	if rec, err := readExit(sdir); err == nil {
		return rec, nil
	}
	if monitorAlive(st) {
		waitPidfd(st)
		// A zombie monitor is not pollable as exited until reaped by its
		// parent; fall through to polling.
	}
	for {
		if rec, err := readExit(sdir); err == nil {
			return rec, nil
		}
		if !monitorAlive(st) {
			if rec, err := readExit(sdir); err == nil {
				return rec, nil
			}
			return nil, fmt.Errorf("oci %s: the monitor is gone and recorded no exit: %w", st.ID, sandbox.ErrUnavailable)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPidfd blocks until the recorded monitor exits, if it can be pinned
// by a pidfd that is the same process (start time checked after opening).
func waitPidfd(st stateFile) {
	if fd, ok := procfs.OpenPidfd(st.MonitorPID, st.MonitorStart); ok {
		procfs.AwaitPidfd(fd, -1)
		unix.Close(fd)
	}
}

// killMonitor SIGKILLs the recorded monitor through a pidfd pinned to it
// (start time checked after opening, so a reused PID is never hit) and
// waits up to bound for it to be gone.
func killMonitor(st stateFile, bound time.Duration) {
	fd, ok := procfs.OpenPidfd(st.MonitorPID, st.MonitorStart)
	if !ok {
		return
	}
	defer unix.Close(fd)
	if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
		procfs.AwaitPidfd(fd, bound)
	}
}

// Cleanup implements sandbox.Backend.
func (b *Backend) Cleanup(ctx context.Context, ref sandbox.Ref) error {
	if ref.Backend != b.name {
		return fmt.Errorf("ref of backend %q given to %q: %w", ref.Backend, b.name, sandbox.ErrNotFound)
	}
	if !idPattern.MatchString(ref.ID) {
		return nil // nothing of ours can have that name
	}
	sdir := b.stateDir(ref.ID)
	c := lookupLive(sdir)
	if c != nil && !c.exited() {
		return fmt.Errorf("cleanup %s: %w", ref.ID, sandbox.ErrRunning)
	}
	if c == nil {
		var err error
		if c, err = b.stoppedOnDisk(ctx, sdir, ref.ID); c == nil {
			return err
		}
	}
	if err := c.destroy(ctx); err != nil {
		return err
	}
	live.Lock()
	if live.m[sdir] != nil {
		live.m[sdir].cleaned = true
	}
	delete(live.m, sdir)
	live.Unlock()
	return nil
}

// stoppedOnDisk is the container to clean up that this process does not
// know: nil with ErrRunning while it runs, nil and no error when there is
// nothing left.
func (b *Backend) stoppedOnDisk(ctx context.Context, sdir, id string) (*container, error) {
	ins, err := b.inspectDisk(ctx, sdir, id)
	if err != nil && !errors.Is(err, sandbox.ErrUnavailable) {
		return nil, err
	}
	if err == nil && (ins.Phase == sandbox.PhaseRunning || ins.Phase == sandbox.PhaseStarting) {
		return nil, fmt.Errorf("cleanup %s: %w", id, sandbox.ErrRunning)
	}
	st, err := loadState(sdir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("oci cleanup %s: %w: %w", id, sandbox.ErrUnavailable, err)
	}
	return newContainer(b.name, st, sdir), nil
}

package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// live holds the containers this process started or attached, keyed by
// state directory, so that every Backend value over the same Root shares
// one set of streams and one exit per container.
var live = struct {
	sync.Mutex
	m map[string]*container
}{m: map[string]*container{}}

// container is one container as seen by this process; all its handles
// share it.
type container struct {
	b        string
	id       string
	st       stateFile
	stateDir string
	grace    time.Duration
	drain    time.Duration

	monitor   *exec.Cmd
	monExited chan struct{}
	settled   <-chan struct{} // the container's last process is gone
	logs      [2]*sandbox.OutputLog
	stdin     *sandbox.Stdin
	readers   [2]*os.File
	master    *os.File // a terminal's (readers[0]); nil for pipes
	pumps     sync.WaitGroup

	done    chan struct{}
	exit    sandbox.Exit
	err     error
	cleaned bool // under live's lock
}

func newContainer(backend string, st stateFile, sdir string) *container {
	return &container{b: backend, id: st.ID, st: st, stateDir: sdir, grace: time.Duration(st.Grace), drain: time.Duration(st.Drain), done: make(chan struct{})}
}

const pumpChunk = 64 << 10

// startPumps copies the container's stdout and stderr pipes into its
// logs, each read bounded by the log's free space (backpressure).
func (c *container) startPumps() {
	for i := range c.readers {
		if c.readers[i] == nil {
			c.logs[i].CloseWrite() // a terminal: one stream
			continue
		}
		c.pumps.Add(1)
		go c.pump(c.readers[i], c.logs[i])
	}
}

func (c *container) pump(r *os.File, l *sandbox.OutputLog) {
	defer c.pumps.Done()
	defer l.CloseWrite()
	buf := make([]byte, pumpChunk)
	for {
		n := l.WaitSpace(c.done)
		if n == 0 {
			// Settled while backpressured: the log was lifted before
			// done closed, so this is the drain bound.
			return
		}
		if n > int64(len(buf)) {
			n = int64(len(buf))
		}
		k, err := r.Read(buf[:n])
		if k > 0 {
			if _, werr := l.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or the pipe was closed at the drain bound
		}
	}
}

// settle waits for the exit record, then for the output pumps (bounded by
// the drain time), and publishes the exit.
func (c *container) settle(wait func() (*exitRecord, error)) {
	rec, err := wait()
	pumped := make(chan struct{})
	go func() { c.pumps.Wait(); close(pumped) }()
	select {
	case <-pumped:
	case <-time.After(c.drain):
		c.sweepReaders()
		<-pumped
	}
	c.closeReaders()
	if c.settled != nil {
		// The monitor ends leftovers at the drain bound: once it says the
		// container is empty, nothing of the process survives Wait.
		select {
		case <-c.settled:
		case <-time.After(c.drain + 10*time.Second):
		}
	}
	if c.stdin != nil {
		c.stdin.Close()
	}
	if err != nil {
		c.err = fmt.Errorf("oci %s: exit status unknown: %v: %w", c.id, err, sandbox.ErrUnavailable)
	} else {
		c.exit = rec.exit()
	}
	close(c.done)
}

// sweepReaders ends the pumps at the drain bound, as the local backend
// does: backpressure is lifted only now (lifting it at the exit, as this
// did before, let the tail still in the pipe overwrite what a slow reader
// had not acknowledged: a Backpressure stream counted drops under load),
// and a short read deadline lets the pumps take what sits in the pipes
// (ring, spill, then counted drops, never unseen) before they stop.
func (c *container) sweepReaders() {
	for _, l := range c.logs {
		if l != nil {
			l.LiftBackpressure()
		}
	}
	for _, r := range c.readers {
		if r != nil && r.SetReadDeadline(time.Now().Add(sweepBound)) != nil {
			r.Close() // not pollable: no sweep, as before
		}
	}
}

// sweepBound is how long the final sweep may read what is already in a
// pipe: it only copies buffered bytes (a pipe holds 64 KiB by default).
const sweepBound = 100 * time.Millisecond

func (c *container) closeReaders() {
	for _, r := range c.readers {
		if r != nil {
			r.Close()
		}
	}
}

// destroy deletes the runtime's container, the bundle, leftover cgroups,
// spill files and the state directory, once the monitor is done with
// them.
func (c *container) destroy(ctx context.Context) error {
	if err := c.awaitMonitor(ctx); err != nil {
		return err
	}
	var errs []error
	if err := c.deleteRuntime(ctx, false); errors.Is(err, errStillRunning) {
		return fmt.Errorf("cleanup %s: %w: %v", c.id, sandbox.ErrRunning, err)
	} else if err != nil {
		errs = append(errs, err)
	}
	if err := c.removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	if err := c.removeLogs(); err != nil {
		errs = append(errs, err)
	}
	if err := removeAll(c.st.SpillDir, c.st.Bundle, c.stateDir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("oci cleanup %s: %w", c.id, errors.Join(errs...))
	}
	return nil
}

// Quiesce waits for the monitors of this Backend's exited containers:
// each outlives its container's exit by a runc delete and two small
// writes into the state directory. A keeper calls it before it exits, so
// that nothing it started still writes into its state once it is gone (a
// loaded TestDurableRestartOCI removed the state directory under a
// monitor writing its "deleted" marker after the keeper's stop_all).
// Each wait is bounded as in Cleanup; the error is ctx's.
func (b *Backend) Quiesce(ctx context.Context) error {
	prefix := b.stateDir("") + string(filepath.Separator) // the containers directory
	var cs []*container
	live.Lock()
	for sdir, c := range live.m {
		if strings.HasPrefix(sdir, prefix) && c.exited() {
			cs = append(cs, c)
		}
	}
	live.Unlock()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.awaitMonitor(ctx) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// awaitMonitor: after the exit, the monitor ends leftovers at the drain
// bound and deletes the runtime's container itself; let it finish. A
// monitor still there at the bound (a runc delete slow under load) is
// killed and waited for: left running, it wrote its "deleted" marker
// into the state directory while the cleanup removed it (a loaded run of
// TestDurableRestartOCI: "directory not empty"). Its unfinished delete is
// then ours (deleteRuntime: no marker).
func (c *container) awaitMonitor(ctx context.Context) error {
	deadline := time.Now().Add(c.drain + 10*time.Second)
	if c.monExited != nil {
		select {
		case <-c.monExited:
			return nil
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for monitorAlive(c.st) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if monitorAlive(c.st) {
		killMonitor(c.st, 5*time.Second)
	}
	return nil
}

// deleteRuntime deletes the runtime's container unless the monitor did.
func (c *container) deleteRuntime(ctx context.Context, force bool) error {
	if c.st.Runtime == "" || fileExists(filepath.Join(c.stateDir, deletedName)) {
		return nil
	}
	return c.st.runtime().delete(ctx, c.st.ContainerID, force)
}

// cgroupRel is the container's relative cgroupsPath: the runtime
// resolves it under the monitor's own cgroups, which are the host's.
func cgroupRel(cid string) string { return "capsule-oci/" + cid }

// removeCgroups removes the container's leftover cgroups (and, for runsc,
// the groups it leaks).
func (c *container) removeCgroups() error {
	var dirs []string
	if err := readJSON(c.stateDir, cgroupsName, &dirs); err != nil {
		// A start that failed before the monitor recorded them: the
		// runtime put them under the monitor's cgroups, which are ours.
		dirs = cgroups.SelfDirs(cgroupRel(c.st.ContainerID))
	}
	if !ownedDirs(dirs, c.st.ContainerID) {
		dirs = nil // never touch a cgroup that is not this container's
	}
	err := cgroups.RemoveDirs(dirs)
	if c.st.RuntimeName == "runsc" {
		sweepRunscLeaks()
	}
	return err
}

// ownedDirs reports whether every dir is a container cgroup named cid.
func ownedDirs(dirs []string, cid string) bool {
	for _, d := range dirs {
		if filepath.Base(d) != cid {
			return false
		}
	}
	return true
}

// sweepRunscLeaks removes the empty runsc-<n> cgroups that runsc leaves
// in every v1 controller when a start fails.
func sweepRunscLeaks() {
	cgroups.RemoveEmptyChildren(cgroups.SelfDirs(""), "runsc-")
}

func (c *container) removeLogs() error {
	var errs []error
	for _, l := range c.logs {
		if l != nil {
			errs = append(errs, l.Remove())
		}
	}
	return errors.Join(errs...)
}

func removeAll(dirs ...string) error {
	var errs []error
	for _, d := range dirs {
		if d != "" {
			errs = append(errs, os.RemoveAll(d))
		}
	}
	return errors.Join(errs...)
}

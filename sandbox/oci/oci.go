// Package oci is the OCI execution backend: each process is a container
// run by runc (the default) or runsc (gVisor, per launch profile), built
// only from an operator-approved launch Profile plus the seam's
// ProcessSpec. The guest never supplies OCI JSON, runtime flags, mounts,
// capabilities or host paths.
//
// Lifecycle mapping. Start = the runtime's create + start, run by a small
// monitor process (see monitor.go) with stdio through pipes the backend
// owns; Inspect = exit record, else the runtime's state; Terminate = the
// runtime's kill (SIGTERM; Force: SIGKILL to all); Cleanup = the runtime's
// delete, then bundle, spill files, leftover cgroups and state removed.
//
// Refs have backend lifetime: a container outlives its Handle, and Attach,
// Inspect and Cleanup work from a fresh Backend value given only the Ref,
// because everything needed is on disk under Options.Root (state.json,
// exit.json, written atomically). In the process that started a
// container, Attach returns the live streams; elsewhere (after a host
// restart) it returns a handle whose output logs are empty and closed and
// which has no stdin: the pipes died with the process that owned them.
package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
	"github.com/capsule-host/capsule-host/sandbox"
)

// Options configure a Backend.
type Options struct {
	// Name is the backend name in every Ref (default "oci").
	Name string
	// Root is the backend's state directory (absolute): per-container
	// state and exit records, and the runtimes' own state.
	Root string
	// BundleDir holds the OCI bundles the backend writes (default
	// Root/bundles).
	BundleDir string
	// Profiles are the operator's approved launch profiles by name.
	Profiles map[string]Profile
	// Runtimes maps a runtime name to its binary. Default: {"runc":
	// runc from PATH}. A profile naming a runtime absent here fails Start
	// with ErrUnavailable.
	Runtimes map[string]string
	// Init is a statically linked capsule-oci-init (see init.go), run as
	// each container's pid 1 so that the process gets ordinary signal
	// semantics and its exact wait status is reported. Default: a static
	// capsule-oci-init beside the host binary or in PATH; without one the
	// process is its container's init (the kernel drops the signals it
	// has no handler for, even SIGTERM from a graceful stop).
	Init string
	// NoInit runs the process as pid 1 even when an init is available.
	NoInit bool
}

// Backend is the OCI backend. Safe for concurrent use; any number of
// Backend values may share one Root.
type Backend struct {
	name     string
	root     string
	bundles  string
	profiles map[string]Profile
	policy   sandbox.BackendPolicy // PolicyOf(profiles), computed once
	runtimes map[string]string
	rootless bool
	swap     bool
	init     string
}

var _ sandbox.Backend = (*Backend)(nil)

// New validates the options and every profile, and creates Root.
func New(opts Options) (*Backend, error) {
	b := &Backend{name: opts.Name, root: opts.Root, bundles: opts.BundleDir, profiles: map[string]Profile{}, runtimes: map[string]string{}}
	if b.name == "" {
		b.name = "oci"
	}
	if err := checkPath(b.root); err != nil {
		return nil, fmt.Errorf("oci: root: %w: %w", sandbox.ErrInvalidSpec, err)
	}
	if b.bundles == "" {
		b.bundles = filepath.Join(b.root, "bundles")
	}
	if err := checkPath(b.bundles); err != nil {
		return nil, fmt.Errorf("oci: bundle dir: %w: %w", sandbox.ErrInvalidSpec, err)
	}
	for n, p := range opts.Runtimes {
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("oci: runtime %q: %w: %w", n, sandbox.ErrInvalidSpec, err)
		}
		b.runtimes[n] = p
	}
	if _, ok := b.runtimes["runc"]; !ok {
		if p, err := exec.LookPath("runc"); err == nil {
			b.runtimes["runc"] = p
		}
	}
	for n, p := range opts.Profiles {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("oci: profile %q: %w", n, err)
		}
		b.profiles[n] = p
	}
	for _, d := range []string{b.root, b.bundles, filepath.Join(b.root, "containers")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("oci: %w: %w", sandbox.ErrUnavailable, err)
		}
	}
	switch {
	case opts.NoInit:
	case opts.Init != "":
		if err := checkPath(opts.Init); err != nil {
			return nil, fmt.Errorf("oci: init: %w: %w", sandbox.ErrInvalidSpec, err)
		}
		if !isStatic(opts.Init) {
			return nil, fmt.Errorf("oci: init %s is not a statically linked executable (build it with CGO_ENABLED=0): %w", opts.Init, sandbox.ErrInvalidSpec)
		}
		b.init = opts.Init
	default:
		b.init = findInit()
	}
	b.rootless = os.Geteuid() != 0
	b.swap = swapAccounted()
	b.policy = PolicyOf(b.profiles)
	return b, nil
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return b.name }

// Profiles returns the validated profiles.
func (b *Backend) Profiles() map[string]Profile { return b.profiles }

var idPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func (b *Backend) stateDir(id string) string { return filepath.Join(b.root, "containers", id) }

func (b *Backend) checkRef(ref sandbox.Ref) error {
	if ref.Backend != b.name {
		return fmt.Errorf("ref of backend %q given to %q: %w", ref.Backend, b.name, sandbox.ErrNotFound)
	}
	if !idPattern.MatchString(ref.ID) {
		return fmt.Errorf("ref id %q: %w", ref.ID, sandbox.ErrNotFound)
	}
	return nil
}

func newID() string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// undo is what a Start that fails midway must take back: each step pushes
// how to undo what it made, and a failed Start runs them newest first
// (the monitor is gone before the runtime's container is deleted, which
// is before the bundle and state directory go).
type undo []func()

func (u *undo) push(f func()) { *u = append(*u, f) }

func (u *undo) run() {
	for i := len(*u) - 1; i >= 0; i-- {
		(*u)[i]()
	}
	*u = nil
}

// Start implements sandbox.Backend: decide, write the bundle, open the
// logs, take a monitor, have it run the container, and wire the handle.
func (b *Backend) Start(ctx context.Context, spec sandbox.ProcessSpec) (_ sandbox.Handle, err error) {
	l, err := b.plan(spec)
	if err != nil {
		return nil, err
	}
	var u undo
	defer func() {
		if err != nil {
			u.run()
		}
	}()
	c, err := b.writeBundle(l, &u)
	if err != nil {
		return nil, err
	}
	if err := c.openLogs(spec.Output, &u); err != nil {
		return nil, err
	}
	mcfg := b.monitorConfig(c, l)
	var cons *console
	if spec.Terminal != nil {
		if cons, err = listenConsole(); err != nil {
			return nil, err
		}
		defer cons.close()
		mcfg.ConsoleSocket = cons.path()
	}
	mon, err := c.takeMonitor(spec.Argv[0], &u)
	if err != nil {
		return nil, err
	}
	status, err := c.run(ctx, mon, mcfg, spec.Argv[0])
	if err != nil {
		return nil, err
	}
	if cons != nil {
		err = c.startTerminal(ctx, cons, mon, spec.Terminal, status)
		if err != nil {
			return nil, err
		}
	} else {
		c.wire(spec.Stdin, mon, status)
	}
	return &handle{c: c}, nil
}

// launch is what Start decided before making anything.
type launch struct {
	spec    sandbox.ProcessSpec
	profile Profile
	limits  sandbox.Limits // the spec's, tightened by the profile
	rtName  string
	rtPath  string
}

// plan validates the spec against its profile and the backend, and picks
// the runtime.
func (b *Backend) plan(spec sandbox.ProcessSpec) (*launch, error) {
	if err := validate(spec); err != nil {
		return nil, err
	}
	prof, err := Lookup(b.profiles, spec.Isolation.Profile)
	if err != nil {
		return nil, err
	}
	// The same check the host made at manifest load (sandbox.CheckProfile
	// over Policy), now for the spec's own request.
	lim, err := sandbox.CheckProfile(b.policy.Profiles, spec.Isolation.Profile, spec.Limits, spec.Isolation.Network)
	if err != nil {
		return nil, err
	}
	if b.rootless {
		// Rootless runc cannot create cgroups without a delegating
		// systemd; a limit we cannot enforce is refused, never ignored.
		switch {
		case lim.MemoryBytes > 0:
			return nil, fmt.Errorf("rootless oci: %w: %s", sandbox.ErrLimitsUnsupported, sandbox.LimitMemory)
		case lim.Pids > 0:
			return nil, fmt.Errorf("rootless oci: %w: %s", sandbox.ErrLimitsUnsupported, sandbox.LimitPids)
		case prof.CPUs > 0:
			return nil, fmt.Errorf("rootless oci: %w: %s", sandbox.ErrLimitsUnsupported, sandbox.LimitCPU)
		}
	}
	l := &launch{spec: spec, profile: prof, limits: lim, rtName: prof.RuntimeName()}
	var ok bool
	if l.rtPath, ok = b.runtimes[l.rtName]; !ok {
		return nil, fmt.Errorf("oci: runtime %q of profile %q is not configured: %w", l.rtName, spec.Isolation.Profile, sandbox.ErrUnavailable)
	}
	if _, err := os.Stat(l.rtPath); err != nil {
		return nil, fmt.Errorf("oci: runtime %q at %s: %v: %w", l.rtName, l.rtPath, err, sandbox.ErrUnavailable)
	}
	return l, nil
}

// validate is the seam's validation plus what a container needs: a
// workspace to bind.
func validate(spec sandbox.ProcessSpec) error {
	if err := spec.ValidateTerminal(); err != nil {
		return err
	}
	if err := checkPath(spec.Isolation.Workspace); err != nil {
		return fmt.Errorf("isolation.workspace: %v: %w", err, sandbox.ErrInvalidSpec)
	}
	if fi, err := os.Stat(spec.Isolation.Workspace); err != nil || !fi.IsDir() {
		return fmt.Errorf("isolation.workspace: %q is not a directory: %w", spec.Isolation.Workspace, sandbox.ErrInvalidSpec)
	}
	return nil
}

func (l *launch) runsc() bool { return l.rtName == "runsc" }

// useInit: capsule-oci-init is pid 1 (runsc has no --preserve-fds for its
// report pipe).
func (b *Backend) useInit(l *launch) bool { return b.init != "" && !l.runsc() }

// globalArgs are the runtime's flags for every command on the container:
// the backend's own runtime root, the log in the state directory, and the
// rootless and (runsc) network modes.
func (b *Backend) globalArgs(l *launch, sdir string) []string {
	args := []string{"--root", filepath.Join(b.root, "runtime-"+l.rtName), "--log", filepath.Join(sdir, logName), "--log-format", "json"}
	switch {
	case l.runsc():
		net := "none"
		if l.profile.network() == NetworkHost && l.spec.Isolation.Network {
			net = "host"
		}
		args = append(args, "--network="+net)
		if b.rootless {
			args = append(args, "--rootless")
		}
	case b.rootless:
		args = append(args, "--rootless", "true")
	}
	return args
}

// writeBundle makes the container's state directory and its bundle with
// config.json.
func (b *Backend) writeBundle(l *launch, u *undo) (*container, error) {
	id := newID()
	sdir := b.stateDir(id)
	st := stateFile{
		ID: id, ContainerID: "capsule-" + id, Runtime: l.rtPath, RuntimeName: l.rtName,
		GlobalArgs: b.globalArgs(l, sdir), Bundle: filepath.Join(b.bundles, id),
		Grace: int64(l.spec.Grace), Drain: int64(l.spec.Drain), Created: time.Now().UTC(),
	}
	c := newContainer(b.name, st, sdir)
	if err := os.Mkdir(sdir, 0o700); err != nil {
		return nil, fmt.Errorf("oci: state dir: %w: %w", sandbox.ErrUnavailable, err)
	}
	u.push(func() { os.RemoveAll(sdir) })
	if err := os.Mkdir(st.Bundle, 0o700); err != nil {
		return nil, fmt.Errorf("oci: bundle: %w: %w", sandbox.ErrUnavailable, err)
	}
	u.push(func() { os.RemoveAll(st.Bundle) })
	in := specInput{profile: l.profile, proc: l.spec, limits: l.limits, cgroup: cgroupRel(st.ContainerID), rootless: b.rootless, hostUID: os.Geteuid(), hostGID: os.Getegid(), swap: b.swap}
	if b.useInit(l) {
		in.init = b.init
	}
	if l.runsc() {
		// gVisor is the isolation boundary; its user namespace support
		// differs from runc's, so the mapping is left to it.
		in.profile.UserNS = nil
	}
	cfg, err := buildSpec(in)
	if err != nil {
		return nil, err
	}
	if err := writeJSONAtomic(filepath.Join(st.Bundle, "config.json"), cfg); err != nil {
		return nil, fmt.Errorf("oci: config.json: %w: %w", sandbox.ErrUnavailable, err)
	}
	return c, nil
}

// openLogs makes the stdout and stderr logs. The spill directory is
// created now, not lazily: the state file names it, so that a fresh
// Backend's Cleanup finds it.
func (c *container) openLogs(out sandbox.OutputSpec, u *undo) error {
	var spill *sandbox.SpillDir
	if out.SpillBytes > 0 {
		d, err := sandbox.NewSpillDir(out.SpillDir)
		if err == nil {
			c.st.SpillDir, err = d.Path()
		}
		if err != nil {
			return err
		}
		u.push(func() { os.RemoveAll(c.st.SpillDir) })
		spill = d
	}
	u.push(func() { c.removeLogs() })
	for i, name := range []string{"stdout", "stderr"} {
		lc := sandbox.OutputLogConfig{RingBytes: out.RingBytes, SpillBytes: out.SpillBytes, Overflow: out.Overflow, Rate: out.Rate}
		if spill != nil {
			lc.Spill, lc.SpillName = spill, name
		}
		l, err := sandbox.NewOutputLog(lc)
		if err != nil {
			return err
		}
		c.logs[i] = l
	}
	return nil
}

// takeMonitor takes the spare monitor (see spare.go) and its pipes, and
// records it in state.json: from here on a fresh Backend can find the
// container.
func (c *container) takeMonitor(argv0 string, u *undo) (*monitorProc, error) {
	// Once a monitor has its config the runtime may make a container and
	// cgroups; a failed start deletes them after the monitor is gone.
	u.push(func() {
		_ = c.deleteRuntime(context.Background(), true)
		_ = c.removeCgroups()
	})
	mon, err := takeMonitor()
	if err != nil {
		return nil, &sandbox.SpawnError{Argv0: argv0, Cause: err}
	}
	u.push(mon.discard)
	// The next spare starts while this container does: measured, this
	// beats starting it once the container runs (1.03-1.09x vs
	// 1.15-1.27x of runc run under load 7).
	refill()
	c.st.MonitorPID = mon.cmd.Process.Pid
	c.st.MonitorStart = mon.start
	statePath := filepath.Join(c.stateDir, stateName)
	if err := writeJSONAtomic(statePath, c.st); err != nil {
		return nil, fmt.Errorf("oci: state: %w: %w", sandbox.ErrUnavailable, err)
	}
	// Durable soon, off the start path: a crash within these milliseconds
	// loses no more than a crash just before Start.
	go atomicfile.SyncFile(statePath)
	return mon, nil
}

// monitorConfig is what the monitor needs to run container c.
func (b *Backend) monitorConfig(c *container, l *launch) monitorConfig {
	mcfg := monitorConfig{
		Runtime: c.st.Runtime, GlobalArgs: c.st.GlobalArgs, ContainerID: c.st.ContainerID,
		Bundle: c.st.Bundle, StateDir: c.stateDir, CgroupRel: cgroupRel(c.st.ContainerID),
		Init: b.useInit(l), Drain: l.spec.Drain, SignalCodes: l.runsc(),
		StdinNull: l.spec.Stdin.Mode == sandbox.StdinClosed,
	}
	if l.limits.CPUTime > 0 {
		mcfg.CPULimit = time.Duration(math.Ceil(l.limits.CPUTime.Seconds())) * time.Second
	}
	return mcfg
}

// run sends the monitor its config (on its fd 4; EOF ends it), upon which
// it runs the container, and waits for its first status line: the
// container runs, or why it does not.
func (c *container) run(ctx context.Context, mon *monitorProc, mcfg monitorConfig, argv0 string) (*statusLines, error) {
	if mcfg.StdinNull {
		mon.stdinW.Close() // the monitor puts /dev/null on the container's stdin
		mon.stdinW = nil
	}
	cb, err := json.Marshal(mcfg)
	if err == nil {
		_, err = mon.cfgW.Write(cb)
	}
	if cerr := mon.cfgW.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The monitor died idle (EPIPE) or the config did not encode.
		return nil, &sandbox.SpawnError{Argv0: argv0, Cause: fmt.Errorf("oci monitor: %w", err)}
	}
	c.monitor, c.monExited = mon.cmd, mon.exited
	status := readStatus(mon.statR)
	var first monitorStatus
	select {
	case first = <-status.first:
	case <-ctx.Done():
		_ = mon.cmd.Process.Kill()
		<-status.first
		return nil, fmt.Errorf("oci start: %w", ctx.Err())
	}
	if first.Error != "" {
		// Whatever the container printed before failing (runc writes its
		// own errors to the container's stderr) is not worth keeping.
		return nil, &sandbox.SpawnError{Argv0: argv0, Cause: first.startErr()}
	}
	// The init's pid is on disk already (the runtime's init.pid, which
	// Attach reads): state.json is not rewritten for it.
	c.st.InitPID = first.PID
	return status, nil
}

// wire hands the started container's pipes to its handle: stdin as the
// spec asks, stdout and stderr to the pumps; the exit comes from the
// monitor's status line, else its record on disk.
func (c *container) wire(in sandbox.StdinSpec, mon *monitorProc, status *statusLines) {
	data := append([]byte(nil), in.Data...)
	switch in.Mode {
	case sandbox.StdinBytes:
		go func() {
			// Written in the background: a process that never reads its
			// stdin must not block Start. EPIPE just means it did not
			// want it.
			_, _ = mon.stdinW.Write(data)
			mon.stdinW.Close()
		}()
	case sandbox.StdinOpen:
		c.stdin = sandbox.NewStdin(mon.stdinW, data)
	}
	c.readers = [2]*os.File{mon.outR, mon.errR}
	c.settled = status.settled
	c.startPumps()
	go c.settle(func() (*exitRecord, error) {
		select {
		case <-status.exit:
			if status.rec != nil {
				return status.rec, nil
			}
		case <-c.monExited:
		}
		return readExit(c.stateDir)
	})
	live.Lock()
	live.m[c.stateDir] = c
	live.Unlock()
}

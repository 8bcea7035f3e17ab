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
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	return b, nil
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return b.name }

// Profiles returns the validated profiles (for CheckManifest).
func (b *Backend) Profiles() map[string]Profile { return b.profiles }

// live holds the containers this process started or attached, keyed by
// state directory, so that every Backend value over the same Root shares
// one set of streams and one exit per container.
var live = struct {
	sync.Mutex
	m map[string]*container
}{m: map[string]*container{}}

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

// stateFile is state.json: what a fresh Backend value needs to find,
// observe and clean up a container.
type stateFile struct {
	ID           string    `json:"id"`
	ContainerID  string    `json:"container_id"`
	Runtime      string    `json:"runtime"`
	RuntimeName  string    `json:"runtime_name"`
	GlobalArgs   []string  `json:"global_args"`
	Bundle       string    `json:"bundle"`
	SpillDir     string    `json:"spill_dir,omitempty"`
	MonitorPID   int       `json:"monitor_pid,omitempty"`
	MonitorStart uint64    `json:"monitor_start,omitempty"`
	InitPID      int       `json:"init_pid,omitempty"`
	Grace        int64     `json:"grace_ns"`
	Drain        int64     `json:"drain_ns"`
	Created      time.Time `json:"created"`
}

// validate is the seam's validation plus what a container needs: a
// workspace to bind.
func validate(spec sandbox.ProcessSpec) error {
	if err := spec.Validate(); err != nil {
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

func newID() string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// Start implements sandbox.Backend.
func (b *Backend) Start(ctx context.Context, spec sandbox.ProcessSpec) (sandbox.Handle, error) {
	if err := validate(spec); err != nil {
		return nil, err
	}
	prof, err := Lookup(b.profiles, spec.Isolation.Profile)
	if err != nil {
		return nil, err
	}
	if spec.Isolation.Network && prof.network() != NetworkHost {
		return nil, fmt.Errorf("%w: profile %q has network %q; the spec asks for the network", ErrWidens, spec.Isolation.Profile, prof.network())
	}
	lim, err := prof.Tighten(spec.Limits)
	if err != nil {
		return nil, fmt.Errorf("profile %q: %w", spec.Isolation.Profile, err)
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
	rtName := prof.RuntimeName()
	rtPath, ok := b.runtimes[rtName]
	if !ok {
		return nil, fmt.Errorf("oci: runtime %q of profile %q is not configured: %w", rtName, spec.Isolation.Profile, sandbox.ErrUnavailable)
	}
	if _, err := os.Stat(rtPath); err != nil {
		return nil, fmt.Errorf("oci: runtime %q at %s: %v: %w", rtName, rtPath, err, sandbox.ErrUnavailable)
	}

	id := newID()
	cid := "capsule-" + id
	st := stateFile{
		ID: id, ContainerID: cid, Runtime: rtPath, RuntimeName: rtName,
		Bundle: filepath.Join(b.bundles, id), Grace: int64(spec.Grace), Drain: int64(spec.Drain),
		Created: time.Now().UTC(),
	}
	sdir := b.stateDir(id)
	st.GlobalArgs = []string{"--root", filepath.Join(b.root, "runtime-"+rtName), "--log", filepath.Join(sdir, "runtime.log"), "--log-format", "json"}
	if rtName == "runsc" {
		net := "none"
		if prof.network() == NetworkHost && spec.Isolation.Network {
			net = "host"
		}
		st.GlobalArgs = append(st.GlobalArgs, "--network="+net)
		if b.rootless {
			st.GlobalArgs = append(st.GlobalArgs, "--rootless")
		}
	} else if b.rootless {
		st.GlobalArgs = append(st.GlobalArgs, "--rootless", "true")
	}
	c := &container{b: b.name, id: id, st: st, stateDir: sdir, grace: spec.Grace, drain: spec.Drain, done: make(chan struct{})}
	cleanupOnFail := func() {
		c.destroy(context.Background(), true)
	}
	if err := os.Mkdir(sdir, 0o700); err != nil {
		return nil, fmt.Errorf("oci: state dir: %w: %w", sandbox.ErrUnavailable, err)
	}
	if err := os.Mkdir(st.Bundle, 0o700); err != nil {
		os.RemoveAll(sdir)
		return nil, fmt.Errorf("oci: bundle: %w: %w", sandbox.ErrUnavailable, err)
	}
	in := specInput{profile: prof, proc: spec, limits: lim, cgroup: "capsule-oci/" + cid, rootless: b.rootless, hostUID: os.Geteuid(), hostGID: os.Getegid(), swap: b.swap}
	useInit := b.init != "" && rtName != "runsc" // runsc has no --preserve-fds
	if useInit {
		in.init = b.init
	}
	if rtName == "runsc" {
		// gVisor is the isolation boundary; its user namespace support
		// differs from runc's, so the mapping is left to it.
		in.profile.UserNS = nil
	}
	cfg, err := buildSpec(in)
	if err != nil {
		cleanupOnFail()
		return nil, err
	}
	if err := writeJSONAtomic(filepath.Join(st.Bundle, "config.json"), cfg); err != nil {
		cleanupOnFail()
		return nil, fmt.Errorf("oci: config.json: %w: %w", sandbox.ErrUnavailable, err)
	}
	mcfg := monitorConfig{Runtime: rtPath, GlobalArgs: st.GlobalArgs, ContainerID: cid, Bundle: st.Bundle, StateDir: sdir, CgroupRel: in.cgroup, Init: useInit, Drain: spec.Drain, SignalCodes: rtName == "runsc"}
	if lim.CPUTime > 0 {
		mcfg.CPULimit = time.Duration(math.Ceil(lim.CPUTime.Seconds())) * time.Second
	}
	mcfg.StdinNull = spec.Stdin.Mode == sandbox.StdinClosed

	// Output logs.
	// The spill directory is created now, not lazily: the state file names
	// it, so that a fresh Backend's Cleanup finds it.
	var spill *sandbox.SpillDir
	if spec.Output.SpillBytes > 0 {
		d, err := sandbox.NewSpillDir(spec.Output.SpillDir)
		if err == nil {
			c.st.SpillDir, err = d.Path()
		}
		if err != nil {
			cleanupOnFail()
			return nil, err
		}
		spill = d
	}
	for i, name := range []string{"stdout", "stderr"} {
		lc := sandbox.OutputLogConfig{RingBytes: spec.Output.RingBytes, SpillBytes: spec.Output.SpillBytes, Overflow: spec.Output.Overflow}
		if spill != nil {
			lc.Spill, lc.SpillName = spill, name
		}
		l, err := sandbox.NewOutputLog(lc)
		if err != nil {
			cleanupOnFail()
			return nil, err
		}
		c.logs[i] = l
	}
	// The monitor (a spare started ahead of need, see spare.go) and its
	// pipes: the host keeps the read ends of stdout/stderr and the write
	// end of stdin; the monitor passes its own to the runtime, which hands
	// them to the container.
	mon, err := takeMonitor()
	if err != nil {
		cleanupOnFail()
		return nil, &sandbox.SpawnError{Argv0: spec.Argv[0], Cause: err}
	}
	// The next spare starts while this container does: measured, this
	// beats starting it once the container runs (1.03-1.09x vs
	// 1.15-1.27x of runc run under load 7).
	refill()
	c.st.MonitorPID = mon.cmd.Process.Pid
	c.st.MonitorStart = mon.start
	statePath := filepath.Join(sdir, "state.json")
	if err := writeJSONAtomic(statePath, c.st); err != nil {
		mon.discard()
		cleanupOnFail()
		return nil, fmt.Errorf("oci: state: %w: %w", sandbox.ErrUnavailable, err)
	}
	// Durable soon, off the start path: a crash within these milliseconds
	// loses no more than a crash just before Start.
	go syncPath(statePath)
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	stdinW, outR, errR, statR := mon.stdinW, mon.outR, mon.errR, mon.statR
	if spec.Stdin.Mode == sandbox.StdinClosed {
		stdinW.Close() // the monitor puts /dev/null on the container's stdin
		stdinW = nil
	}
	// The config goes on the monitor's fd 4; EOF ends it. Once it is
	// written the monitor runs the runtime.
	cb, err := json.Marshal(mcfg)
	if err == nil {
		_, err = mon.cfgW.Write(cb)
	}
	if cerr := mon.cfgW.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The monitor died idle (EPIPE) or the config did not encode.
		closeAll([]*os.File{stdinW, outR, errR, statR})
		<-mon.exited
		cleanupOnFail()
		return nil, &sandbox.SpawnError{Argv0: spec.Argv[0], Cause: fmt.Errorf("oci monitor: %w", err)}
	}
	c.monitor = mon.cmd
	c.settled = nil
	monExited := mon.exited
	c.monExited = monExited

	// Status lines from the monitor: "started" (or failed), then "exit
	// recorded". EOF on the second means the monitor is gone.
	first := make(chan monitorStatus, 1)
	exitLine := make(chan struct{})
	var exitRec *exitRecord // set before exitLine closes
	settledLine := make(chan struct{})
	go func() {
		defer close(settledLine)
		exitClosed := false
		defer func() {
			if !exitClosed {
				close(exitLine)
			}
		}()
		rd := bufio.NewReader(statR)
		defer statR.Close()
		var st monitorStatus
		line, err := rd.ReadBytes('\n')
		if err != nil && len(line) == 0 {
			st.Error = fmt.Sprintf("monitor exited without a status: %v", err)
		} else if err := json.Unmarshal(line, &st); err != nil {
			st.Error = fmt.Sprintf("monitor status %q: %v", line, err)
		}
		first <- st
		if st.Error != "" {
			return
		}
		for {
			line, err := rd.ReadBytes('\n')
			var m monitorStatus
			if len(line) > 0 && json.Unmarshal(line, &m) == nil {
				if m.Exit && !exitClosed {
					exitRec = m.Record
					close(exitLine)
					exitClosed = true
				}
				if m.Settled {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var res monitorStatus
	var startErr error
	select {
	case res = <-first:
	case <-ctx.Done():
		_ = mon.cmd.Process.Kill()
		<-first
		startErr = ctx.Err()
	}
	if startErr == nil && res.Error != "" {
		startErr = errors.New(res.Error)
		if res.Errno != 0 {
			startErr = fmt.Errorf("%w: %s", syscall.Errno(res.Errno), res.Error)
		}
	}
	if startErr != nil {
		// Whatever the container printed before failing (runc writes its
		// own errors to the container's stderr) is not worth keeping.
		closeAll([]*os.File{stdinW, outR, errR})
		<-monExited
		cleanupOnFail()
		if rtName == "runsc" {
			sweepRunscLeaks()
		}
		if errors.Is(startErr, context.Canceled) || errors.Is(startErr, context.DeadlineExceeded) {
			return nil, fmt.Errorf("oci start: %w", startErr)
		}
		return nil, &sandbox.SpawnError{Argv0: spec.Argv[0], Cause: classify(startErr)}
	}
	// The init's pid is on disk already (the runtime's init.pid, which
	// Attach reads): state.json is not rewritten for it.
	c.st.InitPID = res.PID

	switch spec.Stdin.Mode {
	case sandbox.StdinBytes:
		go func(data []byte) {
			// Written in the background: a process that never reads its
			// stdin must not block Start. EPIPE just means it did not
			// want it.
			_, _ = stdinW.Write(data)
			stdinW.Close()
		}(append([]byte(nil), spec.Stdin.Data...))
	case sandbox.StdinOpen:
		c.stdin = sandbox.NewStdin(stdinW, append([]byte(nil), spec.Stdin.Data...))
	}
	c.readers = [2]*os.File{outR, errR}
	c.settled = settledLine
	c.startPumps()
	go c.settle(func() (*exitRecord, error) {
		select {
		case <-exitLine:
			if exitRec != nil {
				return exitRec, nil
			}
		case <-monExited:
		}
		return readExit(sdir)
	})

	live.Lock()
	live.m[sdir] = c
	live.Unlock()
	return &handle{c: c}, nil
}

// classify maps a runtime's failure text to the OS error class the seam
// promises in SpawnError.Cause (fs.ErrNotExist, fs.ErrPermission).
func classify(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return err // the init's exec error: errors.Is(err, fs.ErrNotExist) works
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no such file or directory"), strings.Contains(msg, "executable file not found"):
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	case strings.Contains(msg, "permission denied"):
		return fmt.Errorf("%w: %w", fs.ErrPermission, err)
	}
	return err
}

func readExit(sdir string) (*exitRecord, error) {
	b, err := os.ReadFile(filepath.Join(sdir, "exit.json"))
	if err != nil {
		return nil, err
	}
	var r exitRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("exit record: %w", err)
	}
	return &r, nil
}

func (r *exitRecord) exit() sandbox.Exit {
	return sandbox.Exit{Code: r.Code, Signal: syscall.Signal(r.Signal), KilledFor: sandbox.LimitKind(r.KilledFor), At: r.At}
}

// procStartTime is field 22 of /proc/pid/stat (0 if unreadable): with the
// pid it names one process for good, so a reused pid is never mistaken
// for our monitor.
func procStartTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// runtimeState is the runtime's `state` answer.
type runtimeState struct {
	Status string `json:"status"`
	Pid    int    `json:"pid"`
}

var errNoContainer = errors.New("container does not exist")

func runtimeCmd(ctx context.Context, st stateFile, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, st.Runtime, append(append([]string(nil), st.GlobalArgs...), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not exist") {
			return out, fmt.Errorf("%s %s: %w", filepath.Base(st.Runtime), args[0], errNoContainer)
		}
		return out, fmt.Errorf("%s %s: %v: %s", filepath.Base(st.Runtime), args[0], err, msg)
	}
	return out, nil
}

func queryState(ctx context.Context, st stateFile) (runtimeState, error) {
	out, err := runtimeCmd(ctx, st, "state", st.ContainerID)
	if err != nil {
		return runtimeState{}, err
	}
	var rs runtimeState
	if err := json.Unmarshal(out, &rs); err != nil {
		return runtimeState{}, fmt.Errorf("runtime state: %w", err)
	}
	return rs, nil
}

func loadState(sdir string) (stateFile, error) {
	b, err := os.ReadFile(filepath.Join(sdir, "state.json"))
	if err != nil {
		return stateFile{}, err
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return stateFile{}, fmt.Errorf("state.json: %w", err)
	}
	return st, nil
}

// monitorAlive reports whether the recorded monitor still runs (same pid,
// same start time).
func monitorAlive(st stateFile) bool {
	if st.MonitorPID <= 0 {
		return false
	}
	if err := unix.Kill(st.MonitorPID, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	if st.MonitorStart != 0 && procStartTime(st.MonitorPID) != st.MonitorStart {
		return false
	}
	// A zombie monitor (exited, not yet reaped by its parent) is not
	// alive: its exit record is final.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(st.MonitorPID) + "/stat")
	if err == nil {
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return false
		}
	}
	return true
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
	live.Lock()
	c := live.m[sdir]
	live.Unlock()
	if c != nil {
		select {
		case <-c.done:
			if c.err != nil {
				return sandbox.Inspection{}, c.err
			}
			e := c.exit
			return sandbox.Inspection{Phase: sandbox.PhaseExited, Exit: &e}, nil
		default:
			return sandbox.Inspection{Phase: sandbox.PhaseRunning}, nil
		}
	}
	return b.inspectDisk(ctx, sdir, ref.ID)
}

func (b *Backend) inspectDisk(ctx context.Context, sdir, id string) (sandbox.Inspection, error) {
	if rec, err := readExit(sdir); err == nil {
		e := rec.exit()
		return sandbox.Inspection{Phase: sandbox.PhaseExited, Exit: &e}, nil
	}
	st, err := loadState(sdir)
	if errors.Is(err, fs.ErrNotExist) {
		return sandbox.Inspection{Phase: sandbox.PhaseMissing}, nil
	}
	if err != nil {
		return sandbox.Inspection{}, fmt.Errorf("oci inspect %s: %w: %w", id, sandbox.ErrUnavailable, err)
	}
	alive := monitorAlive(st)
	rs, err := queryState(ctx, st)
	// The monitor may have finished between our two reads.
	if rec, rerr := readExit(sdir); rerr == nil {
		e := rec.exit()
		return sandbox.Inspection{Phase: sandbox.PhaseExited, Exit: &e}, nil
	}
	switch {
	case errors.Is(err, errNoContainer):
		if alive {
			return sandbox.Inspection{Phase: sandbox.PhaseStarting}, nil
		}
		return sandbox.Inspection{Phase: sandbox.PhaseMissing}, nil
	case err != nil:
		return sandbox.Inspection{}, fmt.Errorf("oci inspect %s: %w: %w", id, sandbox.ErrUnavailable, err)
	}
	switch rs.Status {
	case "creating", "created":
		return sandbox.Inspection{Phase: sandbox.PhaseStarting}, nil
	case "running", "paused", "pausing":
		return sandbox.Inspection{Phase: sandbox.PhaseRunning}, nil
	}
	// stopped
	if alive {
		return sandbox.Inspection{Phase: sandbox.PhaseRunning}, nil // settling: the record is being written
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
		// Written by the runtime once the container ran.
		if pb, err := os.ReadFile(filepath.Join(sdir, "init.pid")); err == nil {
			st.InitPID, _ = strconv.Atoi(strings.TrimSpace(string(pb)))
		}
	}
	c := &container{b: b.name, id: ref.ID, st: st, stateDir: sdir, grace: time.Duration(st.Grace), drain: time.Duration(st.Drain), done: make(chan struct{})}
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
	c.pumps.Add(0)
	go c.settle(func() (*exitRecord, error) { return b.watchForeign(st, sdir) })
	live.m[sdir] = c
	return &handle{c: c}, nil
}

// watchForeign waits for the exit record of a container whose monitor is
// not our child: a pidfd on the monitor (start time checked), else
// polling the runtime's state.
func (b *Backend) watchForeign(st stateFile, sdir string) (*exitRecord, error) {
	if rec, err := readExit(sdir); err == nil {
		return rec, nil
	}
	if monitorAlive(st) {
		if fd, err := unix.PidfdOpen(st.MonitorPID, 0); err == nil {
			if procStartTime(st.MonitorPID) == st.MonitorStart || st.MonitorStart == 0 {
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				for {
					_, perr := unix.Poll(fds, -1)
					if perr == nil || !errors.Is(perr, unix.EINTR) {
						break
					}
				}
			}
			unix.Close(fd)
		}
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

// Cleanup implements sandbox.Backend.
func (b *Backend) Cleanup(ctx context.Context, ref sandbox.Ref) error {
	if ref.Backend != b.name {
		return fmt.Errorf("ref of backend %q given to %q: %w", ref.Backend, b.name, sandbox.ErrNotFound)
	}
	if !idPattern.MatchString(ref.ID) {
		return nil // nothing of ours can have that name
	}
	sdir := b.stateDir(ref.ID)
	live.Lock()
	c := live.m[sdir]
	live.Unlock()
	if c != nil {
		select {
		case <-c.done:
		default:
			return fmt.Errorf("cleanup %s: %w", ref.ID, sandbox.ErrRunning)
		}
	} else {
		ins, err := b.inspectDisk(ctx, sdir, ref.ID)
		if err != nil && !errors.Is(err, sandbox.ErrUnavailable) {
			return err
		}
		if err == nil && (ins.Phase == sandbox.PhaseRunning || ins.Phase == sandbox.PhaseStarting) {
			return fmt.Errorf("cleanup %s: %w", ref.ID, sandbox.ErrRunning)
		}
		st, lerr := loadState(sdir)
		if errors.Is(lerr, fs.ErrNotExist) {
			return nil
		}
		if lerr != nil {
			return fmt.Errorf("oci cleanup %s: %w: %w", ref.ID, sandbox.ErrUnavailable, lerr)
		}
		c = &container{b: b.name, id: ref.ID, st: st, stateDir: sdir, done: make(chan struct{})}
	}
	if err := c.destroy(ctx, false); err != nil {
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
	settled   chan struct{} // the container's last process is gone
	logs      [2]*sandbox.OutputLog
	stdin     *sandbox.Stdin
	readers   [2]*os.File
	pumps     sync.WaitGroup

	done    chan struct{}
	exit    sandbox.Exit
	err     error
	cleaned bool // under live's lock
}

const pumpChunk = 64 << 10

func (c *container) startPumps() {
	stop := c.done
	for i := range c.readers {
		r, l := c.readers[i], c.logs[i]
		c.pumps.Add(1)
		go func() {
			defer c.pumps.Done()
			defer l.CloseWrite()
			buf := make([]byte, pumpChunk)
			for {
				n := l.WaitSpace(stop)
				if n == 0 {
					// Settled while backpressured: the log was lifted
					// before done closed, so this is the drain bound.
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
		}()
	}
}

// settle waits for the exit record, then for the output pumps (bounded by
// the drain time), and publishes the exit.
func (c *container) settle(wait func() (*exitRecord, error)) {
	rec, err := wait()
	for _, l := range c.logs {
		if l != nil {
			l.LiftBackpressure()
		}
	}
	pumped := make(chan struct{})
	go func() { c.pumps.Wait(); close(pumped) }()
	select {
	case <-pumped:
	case <-time.After(c.drain):
		for _, r := range c.readers {
			if r != nil {
				r.Close()
			}
		}
		<-pumped
	}
	for _, r := range c.readers {
		if r != nil {
			r.Close()
		}
	}
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

// destroy deletes the runtime's container, the bundle, leftover cgroups,
// spill files and the state directory. force (failed starts only) kills
// first.
func (c *container) destroy(ctx context.Context, force bool) error {
	st := c.st
	var errs []error
	// After the exit, the monitor ends leftovers at the drain bound and
	// deletes the runtime's container itself; let it finish.
	if !force {
		deadline := time.Now().Add(c.drain + 10*time.Second)
		if c.monExited != nil {
			select {
			case <-c.monExited:
			case <-time.After(time.Until(deadline)):
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			for monitorAlive(st) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	if st.Runtime != "" && !fileExists(filepath.Join(c.stateDir, "deleted")) {
		args := []string{"delete"}
		if force {
			args = append(args, "--force")
		}
		if _, err := runtimeCmd(ctx, st, append(args, st.ContainerID)...); err != nil && !errors.Is(err, errNoContainer) {
			if strings.Contains(err.Error(), "running") {
				return fmt.Errorf("cleanup %s: %w: %v", c.id, sandbox.ErrRunning, err)
			}
			errs = append(errs, err)
		}
	}
	var dirs []string
	if b, err := os.ReadFile(filepath.Join(c.stateDir, "cgroups.json")); err == nil {
		_ = json.Unmarshal(b, &dirs)
	} else {
		// A start that failed before the monitor recorded them: the
		// runtime put them under the monitor's cgroups, which are ours.
		dirs = memoryCgroupDirs("capsule-oci/" + st.ContainerID)
	}
	if !ownedDirs(dirs, st.ContainerID) {
		dirs = nil // never touch a cgroup that is not this container's
	}
	if err := removeCgroupDirs(dirs); err != nil {
		errs = append(errs, err)
	}
	if st.RuntimeName == "runsc" {
		sweepRunscLeaks()
	}
	for _, l := range c.logs {
		if l != nil {
			if err := l.Remove(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, d := range []string{st.SpillDir, st.Bundle, c.stateDir} {
		if d != "" {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("oci cleanup %s: %w", c.id, errors.Join(errs...))
	}
	return nil
}

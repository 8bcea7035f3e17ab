package oci

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// The monitor is a tiny process between the host and each container, the
// OCI equivalent of conmon or a containerd shim: the host binary
// re-executed in the reexec role monitorRole, ahead of need (see
// spare.go). Why it exists: after `runc create` exits, the container's
// init is re-parented to the nearest child subreaper, and only that
// process can learn its exit status. If the host were that subreaper, the
// status would die with the host. The monitor is that subreaper instead:
// it runs `run --detach`, waits for the init, reads the OOM counter of
// the container's memory cgroup, and writes exit.json atomically into the
// container's state directory. Anyone (a fresh Backend value, a restarted
// host) then reads the exit from disk. The monitor has its own session, so
// signals aimed at the host's process groups never reach it, and it holds
// none of the container's stdio once the container has started.
//
// Its fds: 0-2 the container's stdio (pipes to the host), 3 its status
// lines (monitorStatus, JSON), 4 its config (monitorConfig, JSON, ended by
// EOF; the fd number is its one argument).
const (
	monitorRole     = "capsule-oci-monitor"
	monitorStatusFD = 3
	monitorConfigFD = 4
)

func init() { reexec.Register(monitorRole, runMonitor) }

// monitorConfig is written by the host to the monitor's fd 4, then
// closed: a pipe, not a file, so that a monitor can be started before its
// container is known.
type monitorConfig struct {
	Runtime     string   `json:"runtime"`
	GlobalArgs  []string `json:"global_args"`
	ContainerID string   `json:"container_id"`
	Bundle      string   `json:"bundle"`
	StateDir    string   `json:"state_dir"`
	// CgroupRel is the relative cgroupsPath of config.json; the runtime
	// resolves it under its own (the monitor's) cgroup per controller.
	CgroupRel string `json:"cgroup_rel"`
	// Init: the container's pid 1 is capsule-oci-init, which reports the
	// child's exec and wait status on fd 3 (see init.go).
	Init bool `json:"init"`
	// Drain bounds how long descendants may outlive the root process
	// before the monitor kills the container.
	Drain time.Duration `json:"drain_ns"`
	// CPULimit is the RLIMIT_CPU given (rounded up to seconds), to tell a
	// SIGKILL for CPU from others.
	CPULimit time.Duration `json:"cpu_limit_ns"`
	// SignalCodes: the waited process reports a signal death n of the
	// container's process as exit code 128+n (runsc's sandbox does);
	// translate it back.
	SignalCodes bool `json:"signal_codes,omitempty"`
	// StdinNull: the container's stdin is /dev/null (the spec's stdin is
	// closed); the monitor's fd 0 is a pipe the host already closed.
	StdinNull bool `json:"stdin_null,omitempty"`
	// ConsoleSocket: the container runs on a terminal; the runtime sends
	// its master to this socket (see terminal.go).
	ConsoleSocket string `json:"console_socket,omitempty"`
}

func (cfg monitorConfig) runtime() runtime { return runtime{path: cfg.Runtime, global: cfg.GlobalArgs} }

// monitorStatus is a line the monitor writes to fd 3: first once the
// container runs (or failed to), then once the exit is recorded.
type monitorStatus struct {
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	// Errno is the OS error under Error, if there is one (the init's
	// exec error, a file the monitor could not read).
	Errno int `json:"errno,omitempty"`
	// Runtime is the runtime's own failure, when `run` ran and failed.
	Runtime *runtimeError `json:"runtime,omitempty"`
	Exit    bool          `json:"exit,omitempty"`
	Record  *exitRecord   `json:"record,omitempty"`
	// Settled: the container's last process is gone.
	Settled bool `json:"settled,omitempty"`
}

// startErr is the failure a first status line reports, rebuilt for the
// host: the OS error and the runtime's classified failure stay testable
// with errors.Is.
func (s monitorStatus) startErr() error {
	var err error = errors.New(s.Error)
	if s.Runtime != nil {
		err = s.Runtime.classified()
	}
	if s.Errno != 0 {
		return fmt.Errorf("%w: %w", syscall.Errno(s.Errno), err)
	}
	return err
}

// execError is the init's report that the process could not be executed.
type execError struct {
	errno syscall.Errno
	what  string
}

func (e *execError) Error() string { return "exec " + e.what }
func (e *execError) Unwrap() error { return e.errno }

// monitor is the state of one monitor process.
type monitor struct {
	status *os.File
	enc    *json.Encoder
	cfg    monitorConfig
	// The cgroup hierarchies (fixed at boot) and the monitor's own
	// membership, read while it idles as a spare.
	mounts []cgroups.Mount
	self   map[string]string
	// cgroups are the container's cgroup directories.
	cgroups []string
	pid     int           // the container's init
	report  *bufio.Reader // capsule-oci-init's report, with cfg.Init
	// initDone gets the init's own exit (wait4) once.
	initDone chan *exitRecord
}

// runMonitor is the monitor role's main.
func runMonitor(args []string) int {
	m := &monitor{status: os.NewFile(monitorStatusFD, "status")}
	unix.CloseOnExec(monitorStatusFD)
	m.enc = json.NewEncoder(m.status)
	ok, err := m.configure(args)
	if err != nil {
		return m.fail(err)
	}
	if !ok {
		return 0 // an unused spare: the host closed it or exited
	}
	if err := m.start(); err != nil {
		return m.fail(err)
	}
	_ = m.enc.Encode(monitorStatus{PID: m.pid})
	rec, initExited := m.waitExit()
	if rec == nil {
		return 2 // unknowable: do not invent an exit
	}
	if err := m.record(rec); err != nil {
		return 3
	}
	m.settle(initExited)
	m.status.Close()
	return 0
}

// fail reports why the container did not start, as the first status line.
func (m *monitor) fail(err error) int {
	s := monitorStatus{Error: fmt.Sprint(err)}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s.Errno = int(errno)
	}
	if re := (*runtimeError)(nil); errors.As(err, &re) && re.ran() {
		s.Runtime = re
	}
	_ = m.enc.Encode(s)
	return 1
}

// configure does what needs no container, then waits for the config on
// the fd named by args (a spare idles here). ok is false for a spare
// whose host closed the config unused.
func (m *monitor) configure(args []string) (ok bool, err error) {
	fd := -1
	if len(args) == 1 {
		fd, _ = strconv.Atoi(args[0])
	}
	if fd < monitorConfigFD {
		return false, fmt.Errorf("monitor: bad config fd %q", args)
	}
	unix.CloseOnExec(fd)
	m.mounts, _ = cgroups.Mounts()
	m.self = cgroups.Membership("self")
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return false, fmt.Errorf("monitor: subreaper: %w", err)
	}
	cfgFile := os.NewFile(uintptr(fd), "config")
	b, err := io.ReadAll(cfgFile)
	cfgFile.Close()
	if err != nil || len(b) == 0 {
		return false, monitorErr(err)
	}
	if err := json.Unmarshal(b, &m.cfg); err != nil {
		return false, monitorErr(err)
	}
	if m.cfg.StdinNull {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return false, monitorErr(err)
		}
		_ = unix.Dup2(int(devnull.Fd()), 0)
		devnull.Close()
	}
	// The cgroups the container will live in, computed before create so
	// that even a process that exits at once has its OOM counter found.
	m.cgroups = cgroups.Dirs(m.mounts, m.self, m.cfg.CgroupRel)
	return true, nil
}

func monitorErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("monitor: %w", err)
}

// start runs the container (`run --detach`: create + start in one
// runtime invocation, one exec of the runtime fewer on every start than
// create, then start), records its cgroups and waits for the init's word
// that the process was executed.
func (m *monitor) start() error {
	pidFile := filepath.Join(m.cfg.StateDir, pidName)
	args := []string{"--detach", "--bundle", m.cfg.Bundle, "--pid-file", pidFile}
	rt := m.cfg.runtime()
	var initW *os.File
	if m.cfg.Init {
		r, w, err := os.Pipe()
		if err != nil {
			return monitorErr(err)
		}
		m.report, initW = bufio.NewReader(r), w
		args = append(args, "--preserve-fds", "1")
	}
	if m.cfg.ConsoleSocket != "" {
		args = append(args, "--console-socket", m.cfg.ConsoleSocket)
	}
	args = append(args, m.cfg.ContainerID)
	run := rt.command(context.Background(), "run", args...)
	if initW != nil {
		run.ExtraFiles = []*os.File{initW}
	}
	// Pass-through stdio: the runtime hands our fds 0-2 (the host's pipes)
	// to the container.
	run.Stdin, run.Stdout, run.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := run.Run()
	if initW != nil {
		initW.Close() // only the init holds the report pipe now
	}
	dropStdio()
	if err != nil {
		return newRuntimeError(rt.name(), "run", args, err, runtimeLogTail(m.cfg.StateDir))
	}
	if m.pid, err = readInitPID(m.cfg.StateDir); err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	// The exact membership, if the init is still there to ask (an exited
	// init reads as the root cgroups: ignore that).
	if dirs := cgroups.ProcDirs(m.mounts, strconv.Itoa(m.pid), ""); len(dirs) > 0 && ownedDirs(dirs, m.cfg.ContainerID) {
		m.cgroups = dirs
	}
	_ = writeJSONAtomic(filepath.Join(m.cfg.StateDir, cgroupsName), m.cgroups)
	return m.initStarted()
}

// dropStdio drops the monitor's copies of the container's stdio, so that
// its pipes reach EOF exactly when the container's processes are gone.
func dropStdio() {
	if devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup2(int(devnull.Fd()), fd)
		}
		devnull.Close()
	}
}

// initStarted reads capsule-oci-init's first report: "ok", or "err
// <errno> <message>" when the process could not be executed.
func (m *monitor) initStarted() error {
	if !m.cfg.Init {
		return nil
	}
	line, _ := m.report.ReadString('\n')
	f := strings.Fields(line)
	switch {
	case len(f) == 1 && f[0] == "ok":
		return nil
	case len(f) >= 2 && f[0] == "err":
		errno, _ := strconv.Atoi(f[1])
		return &execError{errno: syscall.Errno(errno), what: strings.Join(f[2:], " ")}
	}
	return fmt.Errorf("container init did not start the process (%q)", line)
}

// waitExit waits for the process's exit: the init's report of its
// child's wait status when there is an init (the exact status), else the
// init's own. initExited tells whether the init (and so the container) is
// gone too.
func (m *monitor) waitExit() (rec *exitRecord, initExited bool) {
	initDone := make(chan *exitRecord, 1)
	m.initDone = initDone
	go func() { initDone <- wait4(m.pid) }()
	if !m.cfg.Init {
		return m.translate(<-initDone), true
	}
	reported := make(chan *exitRecord, 1)
	go func() {
		line, _ := m.report.ReadString('\n')
		var ws uint32
		var cpu int64
		if n, _ := fmt.Sscanf(line, "exit %d %d", &ws, &cpu); n == 2 {
			reported <- recordFrom(syscall.WaitStatus(ws), cpu)
			return
		}
		reported <- nil // the init died without reporting
	}()
	select {
	case rec = <-reported:
	case rec = <-initDone:
		initExited = true
		if r := <-reported; r != nil {
			rec = r
		}
	}
	if rec == nil && !initExited {
		rec, initExited = <-initDone, true
	}
	return m.translate(rec), initExited
}

// wait4 reaps pid: its exit record, or nil if it cannot be waited for.
func wait4(pid int) *exitRecord {
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	for {
		_, err := syscall.Wait4(pid, &ws, 0, &ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil
		}
		return recordFrom(ws, syscall.TimevalToNsec(ru.Utime)+syscall.TimevalToNsec(ru.Stime))
	}
}

// translate undoes runsc's 128+n for a signal death and tells why the
// kernel killed the process (the memory cgroup's OOM counter, or CPU time
// at the RLIMIT_CPU).
func (m *monitor) translate(rec *exitRecord) *exitRecord {
	if rec == nil {
		return nil
	}
	if m.cfg.SignalCodes && rec.Signal == 0 && rec.Code > 128 && rec.Code < 128+32 {
		rec.Signal, rec.Code = rec.Code-128, 0
	}
	switch {
	case cgroups.OOMKillsIn(m.cgroups) > 0:
		rec.KilledFor = "memory"
	case m.cfg.CPULimit > 0 && (rec.Signal == int(syscall.SIGXCPU) || (rec.Signal == int(syscall.SIGKILL) && time.Duration(rec.CPU) >= m.cfg.CPULimit)):
		rec.KilledFor = "cpu"
	}
	return rec
}

// record writes exit.json, then hands the host the record itself (the
// disk catches up).
func (m *monitor) record(rec *exitRecord) error {
	exitPath := filepath.Join(m.cfg.StateDir, exitName)
	if err := writeJSONAtomic(exitPath, rec); err != nil {
		return err
	}
	_ = m.enc.Encode(monitorStatus{Exit: true, Record: rec})
	_ = atomicfile.SyncFile(exitPath)
	return nil
}

// settle ends the container: descendants of an exited root may write
// during the drain, then are killed; the host is told the container is
// empty; its accounting is saved; the runtime's container is deleted (as
// `runc run` does, which takes the delete off the caller's Cleanup); and
// whatever the runtime left re-parented to the monitor is reaped.
func (m *monitor) settle(initExited bool) {
	rt := m.cfg.runtime()
	if !initExited {
		select {
		case <-m.initDone:
		case <-time.After(m.cfg.Drain):
			_ = rt.kill(context.Background(), m.cfg.ContainerID, syscall.SIGKILL, true)
			<-m.initDone
		}
	}
	// The host's Wait returns on this line; its Stats reads the cgroups
	// themselves until stats.json is there, and they outlive it until the
	// delete below.
	_ = m.enc.Encode(monitorStatus{Settled: true})
	u := cgroups.UsageIn(m.cgroups)
	_ = writeJSONAtomic(filepath.Join(m.cfg.StateDir, statsName), cgroupStats{CPUNS: u.CPUNS, MemoryPeak: u.MemoryPeak})
	if rt.delete(context.Background(), m.cfg.ContainerID, false) == nil {
		_ = os.WriteFile(filepath.Join(m.cfg.StateDir, deletedName), nil, 0o600)
	}
	for {
		var ws syscall.WaitStatus
		if p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); p <= 0 || err != nil {
			break
		}
	}
}

package oci

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The monitor is a tiny process between the host and each container, the
// OCI equivalent of conmon or a containerd shim, made by re-executing the
// host binary (/proc/self/exe) with monitorEnv set, ahead of need (see
// spare.go). Why it exists: after
// `runc create` exits, the container's init is re-parented to the nearest
// child subreaper, and only that process can learn its exit status. If the
// host were that subreaper, the status would die with the host. The
// monitor is that subreaper instead: it runs create and start, waits for
// the init, reads the OOM counter of the container's memory cgroup, and
// writes exit.json atomically into the container's state directory.
// Anyone (a fresh Backend value, a restarted host) then reads the exit
// from disk. The monitor has its own session, so signals aimed at the
// host's process groups never reach it, and it holds none of the
// container's stdio once the container has started.
const monitorEnv = "CAPSULE_OCI_MONITOR"

func init() {
	if p := os.Getenv(monitorEnv); p != "" {
		os.Exit(runMonitor(p))
	}
}

// monitorConfig is written by the host to the monitor's fd 4 (named by
// monitorEnv), then closed: a pipe, not a file, so that a monitor can be
// started before its container is known.
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
}

// monitorStatus is a line the monitor writes to fd 3: first once the
// container runs (or failed to), then once the exit is recorded.
type monitorStatus struct {
	PID    int         `json:"pid,omitempty"`
	Error  string      `json:"error,omitempty"`
	Errno  int         `json:"errno,omitempty"`
	Exit   bool        `json:"exit,omitempty"`
	Record *exitRecord `json:"record,omitempty"`
	// Settled: the container's last process is gone.
	Settled bool `json:"settled,omitempty"`
}

// exitRecord is exit.json: the immutable exit, recorded once.
type exitRecord struct {
	Code      int       `json:"code"`
	Signal    int       `json:"signal,omitempty"`
	KilledFor string    `json:"killed_for,omitempty"`
	At        time.Time `json:"at"`
	CPU       int64     `json:"cpu_ns,omitempty"`
}

func recordFrom(ws syscall.WaitStatus, cpu int64) *exitRecord {
	r := &exitRecord{At: time.Now().UTC(), CPU: cpu}
	if ws.Signaled() {
		r.Signal = int(ws.Signal())
	} else {
		r.Code = ws.ExitStatus()
	}
	return r
}

func runMonitor(cfgFD string) int {
	unix.CloseOnExec(3)
	status := os.NewFile(3, "status")
	enc := json.NewEncoder(status)
	fail := func(errno int, format string, a ...any) int {
		_ = enc.Encode(monitorStatus{Error: fmt.Sprintf(format, a...), Errno: errno})
		return 1
	}
	fd, err := strconv.Atoi(cfgFD)
	if err != nil || fd < 4 {
		return fail(0, "monitor: bad config fd %q", cfgFD)
	}
	unix.CloseOnExec(fd)
	// What does not depend on the container, read before it is known:
	// the cgroup hierarchies (fixed at boot) and our own membership.
	mounts, self := cgroupMounts(), procCgroups("self")
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(0, "monitor: subreaper: %v", err)
	}
	cfgFile := os.NewFile(uintptr(fd), "config")
	// Idle until the host sends a config (a spare monitor waits here).
	b, err := io.ReadAll(cfgFile)
	cfgFile.Close()
	if err != nil {
		return fail(0, "monitor: %v", err)
	}
	if len(b) == 0 {
		return 0 // an unused spare: the host closed it or exited
	}
	var cfg monitorConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fail(0, "monitor: %v", err)
	}
	if cfg.StdinNull {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return fail(0, "monitor: %v", err)
		}
		_ = unix.Dup2(int(devnull.Fd()), 0)
		devnull.Close()
	}
	// The cgroups the container will live in, computed before create so
	// that even a process that exits at once has its OOM counter found.
	memCg := cgroupDirsIn(mounts, self, cfg.CgroupRel)

	pidFile := filepath.Join(cfg.StateDir, "init.pid")
	// `run --detach` is create + start in one runtime invocation: one
	// exec of the runtime fewer on every start than create, then start.
	args := append(append([]string(nil), cfg.GlobalArgs...), "run", "--detach", "--bundle", cfg.Bundle, "--pid-file", pidFile)
	run := exec.Command(cfg.Runtime)
	var initR *os.File
	if cfg.Init {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(0, "monitor: %v", err)
		}
		initR = r
		run.ExtraFiles = []*os.File{w}
		args = append(args, "--preserve-fds", "1")
	}
	run.Args = append([]string{cfg.Runtime}, append(args, cfg.ContainerID)...)
	// Pass-through stdio: the runtime hands our fds 0-2 (the host's pipes)
	// to the container.
	run.Stdin, run.Stdout, run.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = run.Run()
	for _, f := range run.ExtraFiles {
		f.Close() // only the init holds the report pipe now
	}
	// Drop our copies of the container's stdio, so that its pipes reach
	// EOF exactly when the container's processes are gone.
	if devnull, derr := os.OpenFile(os.DevNull, os.O_RDWR, 0); derr == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup2(int(devnull.Fd()), fd)
		}
		devnull.Close()
	}
	if err != nil {
		return fail(0, "%s run: %v%s", filepath.Base(cfg.Runtime), err, runtimeLogTail(cfg.StateDir))
	}
	pb, err := os.ReadFile(pidFile)
	if err != nil {
		return fail(0, "monitor: pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil || pid <= 0 {
		return fail(0, "monitor: bad pid file %q", pb)
	}
	// The exact membership, if the init is still there to ask (an exited
	// init reads as the root cgroups: ignore that).
	if dirs := cgroupDirsIn(mounts, procCgroups(strconv.Itoa(pid)), ""); len(dirs) > 0 && ownedDirs(dirs, cfg.ContainerID) {
		memCg = dirs
	}
	_ = writeJSONAtomic(filepath.Join(cfg.StateDir, "cgroups.json"), memCg)
	var initLines *bufio.Reader
	if cfg.Init {
		initLines = bufio.NewReader(initR)
		line, _ := initLines.ReadString('\n')
		f := strings.Fields(line)
		switch {
		case len(f) == 1 && f[0] == "ok":
		case len(f) >= 2 && f[0] == "err":
			errno, _ := strconv.Atoi(f[1])
			return fail(errno, "exec %s", strings.Join(f[2:], " "))
		default:
			return fail(0, "container init did not start the process (%q)", line)
		}
	}
	_ = enc.Encode(monitorStatus{PID: pid})

	initDone := make(chan *exitRecord, 1)
	go func() {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		for {
			_, err := syscall.Wait4(pid, &ws, 0, &ru)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				initDone <- nil
				return
			}
			initDone <- recordFrom(ws, syscall.TimevalToNsec(ru.Utime)+syscall.TimevalToNsec(ru.Stime))
			return
		}
	}()
	var rec *exitRecord
	initExited := false
	if cfg.Init {
		reported := make(chan *exitRecord, 1)
		go func() {
			line, _ := initLines.ReadString('\n')
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
		if rec == nil {
			rec = <-initDone
			initExited = true
		}
	} else {
		rec = <-initDone
		initExited = true
	}
	if rec == nil {
		return 2 // unknowable: do not invent an exit
	}
	if cfg.SignalCodes && rec.Signal == 0 && rec.Code > 128 && rec.Code < 128+32 {
		rec.Signal, rec.Code = rec.Code-128, 0
	}
	switch {
	case oomKills(memCg) > 0:
		rec.KilledFor = "memory"
	case cfg.CPULimit > 0 && (rec.Signal == int(syscall.SIGXCPU) || (rec.Signal == int(syscall.SIGKILL) && time.Duration(rec.CPU) >= cfg.CPULimit)):
		rec.KilledFor = "cpu"
	}
	exitPath := filepath.Join(cfg.StateDir, "exit.json")
	if err := writeJSONAtomic(exitPath, rec); err != nil {
		return 3
	}
	// The host gets the record itself, then the disk catches up.
	_ = enc.Encode(monitorStatus{Exit: true, Record: rec})
	_ = syncPath(exitPath)
	if !initExited {
		// The root exited; descendants may still write during the drain.
		select {
		case <-initDone:
		case <-time.After(cfg.Drain):
			kill := exec.Command(cfg.Runtime, append(append([]string(nil), cfg.GlobalArgs...), "kill", "--all", cfg.ContainerID, "KILL")...)
			_ = kill.Run()
			<-initDone
		}
	}
	// The container is empty: say so first (the host's Wait returns on
	// it; its Stats reads the cgroups themselves until stats.json is
	// there, and they outlive it until the delete below).
	_ = enc.Encode(monitorStatus{Settled: true})
	// Keep the accounting the runtime's delete is about to remove.
	_ = writeJSONAtomic(filepath.Join(cfg.StateDir, "stats.json"), readCgroupStats(memCg))
	// The exit is on disk: the runtime's container is no longer needed.
	// Deleting it here, as `runc run` does, takes the delete off the
	// caller's Cleanup.
	del := exec.Command(cfg.Runtime, append(append([]string(nil), cfg.GlobalArgs...), "delete", cfg.ContainerID)...)
	if del.Run() == nil {
		_ = os.WriteFile(filepath.Join(cfg.StateDir, "deleted"), nil, 0o600)
	}
	// Reap whatever the runtime left re-parented to us.
	for {
		var ws syscall.WaitStatus
		if p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); p <= 0 || err != nil {
			break
		}
	}
	status.Close()
	return 0
}

func runtimeLogTail(stateDir string) string {
	b, err := os.ReadFile(filepath.Join(stateDir, "runtime.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	// runc logs JSON lines; keep the messages of the last few.
	var msgs []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l struct{ Level, Msg string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg != "" {
			if l.Level == "error" || l.Level == "fatal" || l.Level == "warning" {
				msgs = append(msgs, l.Msg)
			}
		} else if t := strings.TrimSpace(sc.Text()); t != "" {
			msgs = append(msgs, t)
		}
	}
	if len(msgs) > 3 {
		msgs = msgs[len(msgs)-3:]
	}
	if len(msgs) == 0 {
		return ""
	}
	return ": " + strings.Join(msgs, "; ")
}

// writeJSONAtomic writes v to path via a temp file and rename, so a
// reader sees the old file, the new file, or none: never half of one.
// Durability (fsync of the file and its directory) is syncPath's job, and
// only the records a restarted host needs (state.json, exit.json) get it:
// on a busy disk each fsync costs milliseconds on the start path.
func writeJSONAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// syncPath makes a renamed file durable: fsync of the file, then of its
// directory (which holds the rename).
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		if serr := d.Sync(); err == nil {
			err = serr
		}
		d.Close()
	}
	return err
}

package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
)

// A container's state directory, Root/containers/<id>, is all a fresh
// Backend value (or a restarted host) needs. Its files:
//
//	state.json    stateFile, written by Start before the monitor runs
//	exit.json     exitRecord, written once by the monitor
//	init.pid      the runtime's pid file for the container's init
//	cgroups.json  the container's cgroup directories (the monitor)
//	stats.json    cgroupStats, saved by the monitor before the delete
//	deleted       the monitor deleted the runtime's container
//	runtime.log   the runtime's own log (JSON lines)
const (
	stateName   = "state.json"
	exitName    = "exit.json"
	pidName     = "init.pid"
	cgroupsName = "cgroups.json"
	statsName   = "stats.json"
	deletedName = "deleted"
	logName     = "runtime.log"
)

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

// runtime is the runtime command line the container was made with.
func (st stateFile) runtime() runtime { return runtime{path: st.Runtime, global: st.GlobalArgs} }

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

func (r *exitRecord) exit() sandbox.Exit {
	return sandbox.Exit{Code: r.Code, Signal: syscall.Signal(r.Signal), KilledFor: sandbox.LimitKind(r.KilledFor), At: r.At}
}

// cgroupStats is stats.json: what the container's cgroups accounted.
type cgroupStats struct {
	CPUNS      *int64 `json:"cpu_ns,omitempty"`
	MemoryPeak *int64 `json:"memory_peak,omitempty"`
}

// readJSON decodes the state file name of sdir into v. A missing file
// gives an error satisfying errors.Is(err, fs.ErrNotExist).
func readJSON(sdir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(sdir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func loadState(sdir string) (stateFile, error) {
	var st stateFile
	if err := readJSON(sdir, stateName, &st); err != nil {
		return stateFile{}, err
	}
	return st, nil
}

func readExit(sdir string) (*exitRecord, error) {
	var r exitRecord
	if err := readJSON(sdir, exitName, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// readInitPID reads the runtime's pid file: written once the container
// ran, so state.json need not be rewritten for it.
func readInitPID(sdir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(sdir, pidName))
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid file %q", b)
	}
	return pid, nil
}

// writeJSONAtomic writes v to path via a temp file and rename (as runc
// writes its state.json), so a reader sees the old file, the new file, or
// none: never half of one. Durability (fsync of the file and its
// directory) is atomicfile.SyncFile's job, and only the records a restarted host
// needs (state.json, exit.json) get it: on a busy disk each fsync costs
// milliseconds on the start path.
func writeJSONAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600, atomicfile.Options{NoSync: true})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// monitorAlive reports whether the recorded monitor still runs: same pid,
// same start time (so a reused pid is never mistaken for it), and not a
// zombie (exited, not yet reaped by its parent: its exit record is final).
func monitorAlive(st stateFile) bool {
	if st.MonitorPID <= 0 {
		return false
	}
	if err := unix.Kill(st.MonitorPID, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	ps, err := procfs.ReadStat(st.MonitorPID)
	if st.MonitorStart != 0 && (err != nil || ps.Start != st.MonitorStart) {
		return false
	}
	return err != nil || !ps.Zombie()
}

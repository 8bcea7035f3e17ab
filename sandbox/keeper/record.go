package keeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
	"github.com/capsule-host/capsule-host/internal/procfs"
)

// Per-process files in <dir>/procs/<ref-id>/.
const (
	procFile  = "proc.json"
	exitFile  = "exit.json"
	recordVer = 1
)

// procRecord is written once the process runs. It is how a later keeper
// finds what a dead one left running: the root's PID and start time name
// that one process for good (a reused PID has another start time).
type procRecord struct {
	Version   int       `json:"version"`
	Ref       string    `json:"ref"`
	PID       int       `json:"pid"`
	StartTick uint64    `json:"start_tick"`
	Label     string    `json:"label,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// BackendRef is the embedded backend's ID of the process (an OCI
	// container's): a later keeper cleans up what the backend left (the
	// container's and the runtime's state directories, its bundle and
	// cgroups) with it. Empty in the records of older keepers.
	BackendRef string `json:"backend_ref,omitempty"`
}

// exitRecord is written when the process has settled (or, for a dead
// keeper's process, by its successor) and kept until cleanup.
type exitRecord struct {
	Version int      `json:"version"`
	Ref     string   `json:"ref"`
	PID     int      `json:"pid"`
	Label   string   `json:"label,omitempty"`
	Exit    wireExit `json:"exit"`
	// Spill paths let a later keeper serve the output (sandbox.OpenOutputLog).
	StdoutSpill string `json:"stdout_spill,omitempty"`
	StderrSpill string `json:"stderr_spill,omitempty"`
	BackendRef  string `json:"backend_ref,omitempty"` // as in procRecord
}

// writeRecord writes v as name in dir atomically: a temp file renamed
// over the name, so a reader sees the old or the new record, never half.
// It does not sync: an exit record is made durable by the group commit
// (writeExit, commit.go); the proc record never is, because after a
// machine crash there is nothing left to find.
func writeRecord(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("record %s: %w", name, err)
	}
	if err := atomicfile.Write(filepath.Join(dir, name), append(b, '\n'), 0o600, atomicfile.Options{NoSync: true}); err != nil {
		return fmt.Errorf("record %s in %s: %w", name, dir, err)
	}
	return nil
}

func readRecord(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("record %s: %w", path, err)
	}
	return nil
}

// inside reports whether path lies inside dir (a recorded spill path is
// served only from the process's own directory).
func inside(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsAbs(path) && rel != ".." && !strings.HasPrefix(rel, "../")
}

// killOrphan kills what is left of a tree a dead keeper started: every
// member of its session (local starts each root with setsid, so SID =
// root PID), then the root if it still runs. It reports whether the root
// was alive. The session is safe to scan even when the root is gone: the
// kernel does not hand out a PID that is still some process's session
// ID, so members with SID = pid can only be the root's, unless no member
// is left and the PID was reused, which the root's start time tells.
// Each process is signalled through a pidfd opened after its identity was
// checked. Descendants that left the session are the cgroup sweep's
// (local.New, which runs after this).
func killOrphan(pid int, startTick uint64) bool {
	if pid <= 0 || startTick == 0 {
		return false
	}
	st, err := procfs.ReadStat(pid)
	if err == nil && st.Start != startTick {
		return false // the PID was reused: its session is someone else's
	}
	fd, rootAlive := openIdentified(pid, startTick)
	if pids, err := procfs.PIDs(); err == nil {
		for _, p := range pids {
			m, err := procfs.ReadStat(p)
			if err != nil || p == pid || m.SID != pid || m.Start < startTick {
				continue
			}
			if mfd, ok := openIdentified(p, m.Start); ok {
				if again, err := procfs.ReadStat(p); err == nil && again.SID == pid {
					unix.PidfdSendSignal(mfd, unix.SIGKILL, nil, 0)
				}
				unix.Close(mfd)
			}
		}
	}
	if rootAlive {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		unix.Close(fd)
		waitGone(pid, startTick, 2*time.Second)
	}
	return rootAlive
}

// openIdentified opens a pidfd on pid if it is the live process that
// started at startTick.
func openIdentified(pid int, startTick uint64) (int, bool) {
	if pid <= 0 || startTick == 0 {
		return -1, false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, false
	}
	st, err := procfs.ReadStat(pid)
	if err != nil || st.Start != startTick || st.Zombie() {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}

// waitGone waits up to d until the process is dead (gone or a zombie
// awaiting a reaper that is not us).
func waitGone(pid int, startTick uint64, d time.Duration) {
	deadline := time.Now().Add(d)
	for delay := time.Millisecond; time.Now().Before(deadline); delay = min(2*delay, 50*time.Millisecond) {
		st, err := procfs.ReadStat(pid)
		if errors.Is(err, os.ErrNotExist) || err == nil && (st.Start != startTick || st.Zombie()) {
			return
		}
		time.Sleep(delay)
	}
}

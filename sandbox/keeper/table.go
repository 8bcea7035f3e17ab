package keeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
	"github.com/capsule-host/capsule-host/sandbox"
)

// Log is the seam's output log: an OutputLog of the embedded backend in
// the keeper, a RemoteLog in the daemon.
type Log = sandbox.Log

// spillOf is the spill file of an embedded backend's log ("" if none).
func spillOf(l Log) string {
	if ol, ok := l.(*sandbox.OutputLog); ok {
		return ol.SpillPath()
	}
	return ""
}

var (
	_ Log = (*sandbox.OutputLog)(nil)
	_ Log = (*RemoteLog)(nil)
)

// entry is the keeper's record of one process: a live handle of the
// embedded backend, or, after a keeper restart, what the exit record says.
type entry struct {
	id    string
	dir   string
	pid   int
	label string
	h     sandbox.Handle // nil when recovered from disk
	grace time.Duration
	// done is closed once exit is set and its record is on disk: a wait
	// that returned implies the record survives the keeper.
	done chan struct{}
	exit Exit

	mu    sync.Mutex
	logs  [2]Log    // live: the handle's logs; recovered: opened on first use
	spill [2]string // recovered: the recorded spill paths
	bref  string    // recovered: the embedded backend's ID of it ("" if unknown)
}

// backendRef is the embedded backend's ref of the process, for its
// cleanup: the live handle's, or, for a process of a dead keeper, the
// recorded one (what an OCI container leaves on disk outlives its keeper;
// the local backend has nothing of an unknown ref to clean). false for a
// record of an older keeper, which did not record it.
func (e *entry) backendRef(backend string) (sandbox.Ref, bool) {
	if e.h != nil {
		return e.h.Ref(), true
	}
	if e.bref == "" {
		return sandbox.Ref{}, false
	}
	return sandbox.Ref{Backend: backend, ID: e.bref, Lifetime: sandbox.LifetimeBackend}, true
}

func newID() string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

func (e *entry) exited() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// log returns one of the process's output logs. A recovered process's
// log comes from its spill file, read-only and closed; without one it is
// an empty closed log (the bytes lived in a ring that died with a keeper).
func (e *entry) log(s Stream) (Log, error) {
	i, err := s.index()
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.logs[i] != nil {
		return e.logs[i], nil
	}
	if p := e.spill[i]; p != "" && inside(e.dir, p) {
		l, err := sandbox.OpenOutputLog(p)
		if err == nil {
			e.logs[i] = l
			return l, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	l, err := emptyLog()
	if err != nil {
		return nil, err
	}
	e.logs[i] = l
	return l, nil
}

// emptyLog is a closed log that never held a byte.
func emptyLog() (*sandbox.OutputLog, error) {
	l, err := sandbox.NewOutputLog(sandbox.OutputLogConfig{RingBytes: 1, Overflow: sandbox.DropOldest})
	if err != nil {
		return nil, err
	}
	l.CloseWrite()
	return l, nil
}

func (e *entry) status() procInfo {
	pi := procInfo{Ref: e.id, PID: e.pid, Label: e.label, Phase: sandbox.PhaseRunning.String()}
	if e.exited() {
		pi.Phase = sandbox.PhaseExited.String()
		x := exitToWire(e.exit)
		pi.Exit = &x
	}
	return pi
}

// recordExit writes the exit record of a live process that settled
// (monitor calls it once Done is closed) and then closes done. A record
// that cannot be written is logged; the exit is still served from memory
// until the keeper ends.
func (s *server) recordExit(e *entry) {
	x, err := e.h.Wait(context.Background())
	if err != nil {
		s.logf("process %s: wait after done: %v", e.id, err)
	}
	e.exit = Exit{Exit: x, Reason: ReasonExited}
	rec := exitRecord{Version: recordVer, Ref: e.id, PID: e.pid, Label: e.label, Exit: exitToWire(e.exit), BackendRef: e.h.Ref().ID}
	rec.StdoutSpill, rec.StderrSpill = spillOf(e.h.Stdout()), spillOf(e.h.Stderr())
	if err := s.writeExit(e.dir, rec); err != nil {
		s.logf("process %s: %v", e.id, err)
	}
	close(e.done)
}

// writeExit writes an exit record and returns once it is durable: renamed
// unsynced, then made durable by a group commit shared with the exits
// settling meanwhile (commit.go); should that flush fail, by a sync of
// its own.
func (s *server) writeExit(dir string, rec exitRecord) error {
	if err := writeRecord(dir, exitFile, rec); err != nil {
		return err
	}
	if s.cfg.SyncEach { // the benchmark's baseline: two fsyncs of its own
		return atomicfile.SyncFile(filepath.Join(dir, exitFile))
	}
	err := s.commit.sync()
	if err == nil {
		return nil
	}
	if serr := atomicfile.SyncFile(filepath.Join(dir, exitFile)); serr != nil {
		return fmt.Errorf("exit record in %s not durable: %w", dir, errors.Join(err, serr))
	}
	return nil
}

// recoverEntry rebuilds one process of an earlier keeper from its
// directory. With an exit record it is served as is. Without one the
// keeper that owned it died: what still runs of it is killed (its pipes
// died with that keeper, so nobody could read it or write to it any
// more), and a keeper-lost record is written.
// The keeper-lost record is written unsynced: recoverAll makes all of
// them durable with one flush before anything is served.
func (s *server) recoverEntry(id string) (e *entry, lost bool) {
	d := filepath.Join(s.procs, id)
	var rec exitRecord
	err := readRecord(filepath.Join(d, exitFile), &rec)
	if err != nil {
		rec, lost = s.lostRecord(id, d), true
		if err := writeRecord(d, exitFile, rec); err != nil {
			s.logf("process %s: %v (served from memory)", id, err)
			lost = false
		}
	}
	e = &entry{id: id, dir: d, pid: rec.PID, label: rec.Label, done: make(chan struct{}), exit: rec.Exit.exit()}
	e.spill = [2]string{rec.StdoutSpill, rec.StderrSpill}
	e.bref = rec.BackendRef
	close(e.done)
	return e, lost
}

func (s *server) lostRecord(id, d string) exitRecord {
	var pr procRecord
	perr := readRecord(filepath.Join(d, procFile), &pr)
	x := wireExit{Code: -1, At: time.Now(), Reason: ReasonKeeperLost}
	if perr == nil && killOrphan(pr.PID, pr.StartTick) {
		x.Code, x.Signal = 0, int(syscall.SIGKILL)
	}
	s.logf("process %s (pid %d): keeper lost, signal %d", id, pr.PID, x.Signal)
	return exitRecord{Version: recordVer, Ref: id, PID: pr.PID, Label: pr.Label, Exit: x, BackendRef: pr.BackendRef}
}

// recoverAll loads every process directory an earlier keeper left.
func (s *server) recoverAll() error {
	ents, err := os.ReadDir(s.procs)
	if err != nil {
		return fmt.Errorf("keeper recover: %w", err)
	}
	var lost []*entry
	for _, de := range ents {
		if !de.IsDir() || !validID(de.Name()) {
			continue
		}
		e, l := s.recoverEntry(de.Name())
		s.table[e.id] = e
		if l {
			lost = append(lost, e)
		}
	}
	if len(lost) == 0 || s.commit.sync() == nil {
		return nil
	}
	for _, e := range lost { // the shared flush failed: each on its own
		if err := atomicfile.SyncFile(filepath.Join(e.dir, exitFile)); err != nil {
			s.logf("process %s: keeper-lost record not durable: %v (served from memory)", e.id, err)
		}
	}
	return nil
}

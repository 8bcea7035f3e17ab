// Package pidlock is the one exclusive lock on a directory's lock file
// that names its holder: the daemon's on its state directory, the
// keeper's on its own. It is an flock(2) on an O_CLOEXEC descriptor, so
// the kernel drops it when the holder dies, however it dies, no child
// inherits it, and there is no stale lock to clean up. The file records
// "pid start-time" of the holder for the next contender's error message;
// it is never removed (unlinking a lock file races with a process about
// to lock the old inode).
package pidlock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

// ErrHeld: another live process holds the lock (see HeldError).
var ErrHeld = errors.New("lock is held by another process")

// HeldError names the holder. Stale: the recorded process is gone or is
// another process by now (its start time differs), yet the lock is held:
// a child that inherited the descriptor, or a holder not yet recorded.
type HeldError struct {
	Path  string
	PID   int // 0: not recorded yet
	Start uint64
	Stale bool
}

func (e *HeldError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("%s is locked by a process that has not recorded its pid", e.Path)
	}
	return fmt.Sprintf("%s is locked by pid %d", e.Path, e.PID)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// holderWait bounds how long a contender waits for a just-started holder
// to record its pid before reporting it unknown.
const holderWait = 200 * time.Millisecond

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// Acquire opens path (created 0600, never through a symlink), runs check
// on the open file (the caller's ownership rule, on what it will lock, not
// on what the path named a moment earlier), and takes the lock or fails
// at once with a *HeldError.
func Acquire(path string, check func(*os.File) error) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(f); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, holder(path, f)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	pid := os.Getpid()
	// The record is a diagnostic; the flock is the lock, so a failed write
	// does not fail Acquire.
	if f.Truncate(0) == nil {
		f.WriteAt([]byte(fmt.Sprintf("%d %d\n", pid, procfs.StartTime(pid))), 0)
	}
	return &Lock{f: f}, nil
}

// Holder parses a lock file's record: the holder's pid (0 if none).
func Holder(b []byte) (pid int, start uint64) {
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil || pid <= 0 {
		return 0, 0
	}
	return pid, start
}

// holder reads the record of the process that holds f's lock, re-reading
// an empty file for a short, bounded while (a holder that has just taken
// the lock may not have written yet).
func holder(path string, f *os.File) error {
	e := &HeldError{Path: path}
	deadline := time.Now().Add(holderWait)
	for {
		var b [64]byte
		n, _ := f.ReadAt(b[:], 0)
		if e.PID, e.Start = Holder(b[:n]); e.PID > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e.PID > 0 {
		if st := procfs.StartTime(e.PID); st == 0 || (e.Start != 0 && st != e.Start) {
			e.Stale = true
		}
	}
	return e
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// Close releases the lock. The record is erased first, so a reader never
// blames a process that has let go.
func (l *Lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	l.f.Truncate(0)
	err := flock(l.f, syscall.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

// DirLock is the exclusive hold of a state directory by one daemon. It is an
// flock(2) on daemon.lock: the kernel drops it when the holder's last
// descriptor closes, so a daemon killed with SIGKILL frees the directory at
// once and there is no stale-lock cleanup to get wrong. The file is never
// removed (unlinking a lock file races with a process about to lock the
// old inode).
type DirLock struct {
	f    *os.File
	path string
}

// holderWait bounds how long Lock waits for a just-started holder to write
// its PID before reporting "pid unknown".
const holderWait = 200 * time.Millisecond

// Lock takes dir's lock or fails at once with a *LockedError (errors.Is
// ErrLocked) naming the holder's PID. dir must pass CheckPrivateDir. The
// descriptor is close-on-exec: a process the daemon starts (the keeper)
// must never inherit the lock, or it would keep the directory locked after
// the daemon died.
func Lock(dir string) (*DirLock, error) {
	if err := CheckPrivateDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, &FileError{Path: path, Kind: ErrSymlink, Detail: "the lock file must not be a link: remove it"}
	}
	if err != nil {
		return nil, err
	}
	if err := checkLockFile(f, path); err != nil {
		f.Close()
		return nil, err
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, holder(dir, f)
		}
		return nil, fmt.Errorf("statedir: lock %s: %w", path, err)
	}
	pid := os.Getpid()
	rec := fmt.Sprintf("%d %d\n", pid, procfs.StartTime(pid))
	// The record is a diagnostic for the next contender; the flock is the
	// lock, so a failed write does not fail Lock.
	if f.Truncate(0) == nil {
		f.WriteAt([]byte(rec), 0)
	}
	return &DirLock{f: f, path: path}, nil
}

// checkLockFile refuses a lock file another user owns or that is not a
// regular file (its mode is not checked: it holds no secret).
func checkLockFile(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return &FileError{Path: path, Kind: ErrNotRegular, Detail: "remove it"}
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return &FileError{Path: path, Kind: ErrNotOwned, Detail: fmt.Sprintf("owned by uid %d: another user's daemon? use another state directory", uid)}
	}
	return nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// holder reads the PID the holder wrote. A holder that has just taken the
// lock may not have written yet, so an empty file is re-read for a short,
// bounded while.
func holder(dir string, f *os.File) error {
	e := &LockedError{Dir: dir}
	deadline := time.Now().Add(holderWait)
	for {
		var b [64]byte
		n, _ := f.ReadAt(b[:], 0)
		if _, err := fmt.Sscanf(string(b[:n]), "%d %d\n", &e.PID, &e.Start); err == nil && e.PID > 0 {
			break
		}
		e.PID, e.Start = 0, 0
		if time.Now().After(deadline) {
			return e
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := procfs.StartTime(e.PID); st == 0 || (e.Start != 0 && st != e.Start) {
		e.Stale = true
	}
	return e
}

// Path is the lock file's path.
func (l *DirLock) Path() string { return l.path }

// Close releases the lock. The recorded PID is erased first so a reader
// never blames a daemon that has let go.
func (l *DirLock) Close() error {
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

package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/capsule-host/capsule-host/internal/pidlock"
)

// DirLock is the exclusive hold of a state directory by one daemon: a
// pidlock on daemon.lock (the kernel drops it when the holder's last
// descriptor closes, so a daemon killed with SIGKILL frees the directory
// at once).
type DirLock struct {
	l    *pidlock.Lock
	path string
}

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
	l, err := pidlock.Acquire(path, func(f *os.File) error { return checkLockFile(f, path) })
	var held *pidlock.HeldError
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, &FileError{Path: path, Kind: ErrSymlink, Detail: "the lock file must not be a link: remove it"}
	case errors.As(err, &held):
		return nil, &LockedError{Dir: dir, PID: held.PID, Start: held.Start, Stale: held.Stale}
	case err != nil:
		return nil, fmt.Errorf("statedir: lock %s: %w", path, err)
	}
	return &DirLock{l: l, path: path}, nil
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

// Path is the lock file's path.
func (l *DirLock) Path() string { return l.path }

// Close releases the lock.
func (l *DirLock) Close() error {
	if l == nil {
		return nil
	}
	return l.l.Close()
}

package statedir

import (
	"errors"
	"fmt"
)

// Kinds of refusal, for errors.Is. Each is wrapped in a *FileError that
// names the file and what to do about it.
var (
	// ErrInsecure: the mode grants more than the daemon's uid should have.
	ErrInsecure = errors.New("insecure permissions")
	// ErrNotOwned: owned by a uid other than the daemon's.
	ErrNotOwned = errors.New("not owned by the current user")
	// ErrSymlink: a symbolic link where a file must be (it could point
	// anywhere, including a file another user controls).
	ErrSymlink = errors.New("is a symbolic link")
	// ErrNotRegular: a directory, FIFO, device or socket where a file must be.
	ErrNotRegular = errors.New("not a regular file")
	// ErrNotDir: not a directory where one must be.
	ErrNotDir = errors.New("not a directory")
	// ErrSize: a key file of the wrong length (truncated or not ours).
	ErrSize = errors.New("wrong size")
	// ErrLocked: another live process holds the state directory's lock.
	ErrLocked = errors.New("state directory is in use")
)

// FileError is a refused file or directory: which one, which kind of
// problem (Kind, one of the Err* above) and a detail that says the fix.
type FileError struct {
	Path   string
	Kind   error
	Detail string
}

func (e *FileError) Error() string { return fmt.Sprintf("%s: %v: %s", e.Path, e.Kind, e.Detail) }

func (e *FileError) Unwrap() error { return e.Kind }

// LockedError is ErrLocked with the holder recorded in the lock file.
type LockedError struct {
	Dir string
	// PID of the holder as it wrote it, 0 if it wrote nothing readable.
	PID int
	// Start is the holder's start time in clock ticks since boot.
	Start uint64
	// Stale: the recorded PID no longer runs with that start time, so the
	// lock is held by another process (one that inherited the descriptor,
	// or a holder that could not write its PID).
	Stale bool
}

func (e *LockedError) Error() string {
	switch {
	case e.PID == 0:
		return fmt.Sprintf("state directory %s is in use by another capsule-host (pid unknown)", e.Dir)
	case e.Stale:
		return fmt.Sprintf("state directory %s is in use by capsule-host pid %d (that pid no longer runs: another process inherited the lock)", e.Dir, e.PID)
	}
	return fmt.Sprintf("state directory %s is in use by capsule-host pid %d", e.Dir, e.PID)
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

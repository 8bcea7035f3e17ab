package sandbox

import (
	"errors"
	"fmt"
)

// Error classes of the seam. Test with errors.Is; call sites wrap them with
// %w and a message that names what was wrong.
var (
	ErrUnavailable       = errors.New("backend unavailable")
	ErrGracefulTimeout   = errors.New("graceful termination timed out")
	ErrNotDetachable     = errors.New("process is not detachable")
	ErrRunning           = errors.New("process is running")
	ErrNotFound          = errors.New("process not found")
	ErrInvalidSpec       = errors.New("invalid process spec")
	ErrLimitsUnsupported = errors.New("resource limit unsupported")
	// ErrBoundaryEscape: a path leaves the root it is confined to.
	ErrBoundaryEscape = errors.New("path escapes its root")
	// ErrInvalidEnv: an environment entry is reserved, malformed or too big.
	ErrInvalidEnv = errors.New("invalid environment")
	// ErrClosed: the stream is closed.
	ErrClosed = errors.New("stream closed")
	// ErrSpawn is the class of every *SpawnError.
	ErrSpawn = errors.New("spawn failed")
	// ErrBadOffset: a read offset is negative or beyond the stream's end.
	ErrBadOffset = errors.New("offset out of range")
	// ErrSpill: the spill file failed (disk error); the bytes it should
	// have kept are lost and the reader is told how many.
	ErrSpill = errors.New("output spill failed")
)

// SpawnError is a failure to start a process. Cause is the OS error
// (fs.ErrNotExist, fs.ErrPermission, ...), reachable with errors.Is.
type SpawnError struct {
	Argv0 string
	Cause error
}

func (e *SpawnError) Error() string {
	return fmt.Sprintf("spawn %s: %v", e.Argv0, e.Cause)
}

func (e *SpawnError) Unwrap() []error { return []error{ErrSpawn, e.Cause} }

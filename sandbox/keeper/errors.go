package keeper

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/capsule-host/capsule-host/sandbox"
)

// classError is a sentinel that also belongs to a seam class, so that
// errors.Is(err, ErrKeeperGone) and errors.Is(err, sandbox.ErrUnavailable)
// both hold: the seam says a lost attachment is ErrUnavailable.
type classError struct {
	msg   string
	class error
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }

// Error classes of the keeper. Test with errors.Is.
var (
	// ErrKeeperGone: no keeper answers on the directory (no socket, a
	// stale socket whose keeper died, a connection that ended, a keeper
	// that does not answer the hello). Start one, then Dial again.
	ErrKeeperGone error = &classError{"keeper gone", sandbox.ErrUnavailable}
	// ErrProtocol: a peer sent a frame that is not the protocol (garbage,
	// oversized, truncated, an unknown operation or malformed arguments).
	ErrProtocol = errors.New("keeper protocol violation")
	// ErrProtocolVersion: the peers speak no common protocol version.
	ErrProtocolVersion = errors.New("keeper protocol version unsupported")
	// ErrUnsafePath: the directory or socket could be replaced by another
	// user (world- or group-writable, another owner, a symlink).
	ErrUnsafePath = errors.New("keeper path unsafe")
	// ErrKeeperRunning: another keeper holds the directory (see LockedError).
	ErrKeeperRunning = errors.New("keeper already running")
	// ErrShuttingDown: the keeper is stopping and starts nothing new.
	ErrShuttingDown error = &classError{"keeper shutting down", sandbox.ErrUnavailable}
	// ErrBusy: the connection has too many requests in flight.
	ErrBusy = errors.New("keeper connection busy")
	// ErrRemote is the class of every error the keeper reported that maps
	// onto no other class.
	ErrRemote = errors.New("keeper error")
)

// ErrNotFound is the seam's: an unknown or cleaned-up ref.
var ErrNotFound = sandbox.ErrNotFound

// LockedError says which process holds the directory's lock.
type LockedError struct {
	Dir string
	PID int // 0 if the holder did not record itself yet
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("keeper directory %s is held by keeper PID %d", e.Dir, e.PID)
}

func (e *LockedError) Unwrap() error { return ErrKeeperRunning }

// UnsafePathError names the path and why it is refused.
type UnsafePathError struct {
	Path   string
	Reason string
}

func (e *UnsafePathError) Error() string {
	return fmt.Sprintf("keeper: refusing %s: %s", e.Path, e.Reason)
}

func (e *UnsafePathError) Unwrap() error { return ErrUnsafePath }

// codes maps the error classes that cross the wire to their names. An
// error that wraps several classes carries all their names, so that every
// errors.Is that held in the keeper holds in the client.
var codes = []struct {
	code string
	err  error
}{
	{"not_found", sandbox.ErrNotFound},
	{"running", sandbox.ErrRunning},
	{"closed", sandbox.ErrClosed},
	{"bad_offset", sandbox.ErrBadOffset},
	{"graceful_timeout", sandbox.ErrGracefulTimeout},
	{"invalid_spec", sandbox.ErrInvalidSpec},
	{"invalid_env", sandbox.ErrInvalidEnv},
	{"limits_unsupported", sandbox.ErrLimitsUnsupported},
	{"boundary_escape", sandbox.ErrBoundaryEscape},
	{"not_detachable", sandbox.ErrNotDetachable},
	{"no_terminal", sandbox.ErrNoTerminal},
	{"spill", sandbox.ErrSpill},
	{"spawn", sandbox.ErrSpawn},
	{"shutting_down", ErrShuttingDown},
	{"unavailable", sandbox.ErrUnavailable},
	{"canceled", context.Canceled},
	{"deadline", context.DeadlineExceeded},
	{"protocol_version", ErrProtocolVersion},
	{"protocol", ErrProtocol},
	{"busy", ErrBusy},
	{"keeper_running", ErrKeeperRunning},
	{"unsafe_path", ErrUnsafePath},
}

// wireError is an error frame's body.
type wireError struct {
	Codes   []string `json:"codes,omitempty"`
	Message string   `json:"message"`
	// Errno and Argv0 rebuild a *sandbox.SpawnError (code "spawn").
	Errno int    `json:"errno,omitempty"`
	Argv0 string `json:"argv0,omitempty"`
	// PID is the lock holder (code "keeper_running").
	PID int `json:"pid,omitempty"`
	// N is how many bytes a failed stdin write delivered (its torn count).
	N int `json:"n,omitempty"`
	// Supported lists the keeper's versions (code "protocol_version").
	Supported []int `json:"supported,omitempty"`
}

// toWire classifies err by errors.Is/As against the table; nothing is
// decided from its text.
func toWire(err error) *wireError {
	w := &wireError{Message: err.Error()}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			w.Codes = append(w.Codes, c.code)
		}
	}
	var se *sandbox.SpawnError
	if errors.As(err, &se) {
		w.Argv0 = se.Argv0
		var errno syscall.Errno
		if errors.As(se.Cause, &errno) {
			w.Errno = int(errno)
		}
	}
	var le *LockedError
	if errors.As(err, &le) {
		w.PID = le.PID
	}
	var te *tornError
	if errors.As(err, &te) {
		w.N = te.n
	}
	if errors.Is(err, ErrProtocolVersion) {
		w.Supported = []int{ProtocolVersion}
	}
	return w
}

// RemoteError is an error the keeper reported. It unwraps to every class
// the keeper-side error belonged to.
type RemoteError struct {
	Op      string
	Message string
	classes []error
}

func (e *RemoteError) Error() string { return "keeper " + e.Op + ": " + e.Message }

func (e *RemoteError) Unwrap() []error { return e.classes }

// remoteCause is a spawn failure's cause as the keeper saw it; it unwraps
// to the errno, so errors.Is(err, fs.ErrNotExist) works as locally.
type remoteCause struct {
	msg   string
	errno syscall.Errno
}

func (e *remoteCause) Error() string { return e.msg }
func (e *remoteCause) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

// fromWire rebuilds a typed error from an error frame.
func fromWire(op string, w *wireError) error {
	re := &RemoteError{Op: op, Message: w.Message}
	for _, name := range w.Codes {
		for _, c := range codes {
			if c.code == name {
				re.classes = append(re.classes, c.err)
			}
		}
	}
	if len(re.classes) == 0 {
		re.classes = []error{ErrRemote}
	}
	for _, name := range w.Codes {
		switch name {
		case "spawn":
			cause := &remoteCause{msg: w.Message, errno: syscall.Errno(w.Errno)}
			re.classes = append(re.classes, &sandbox.SpawnError{Argv0: w.Argv0, Cause: cause})
		case "keeper_running":
			re.classes = append(re.classes, &LockedError{PID: w.PID})
		}
	}
	if w.N > 0 {
		return &tornError{n: w.N, err: re}
	}
	return re
}

// tornError carries the number of bytes a failed stdin write delivered.
type tornError struct {
	n   int
	err error
}

func (e *tornError) Error() string { return e.err.Error() }
func (e *tornError) Unwrap() error { return e.err }

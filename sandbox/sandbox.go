// Package sandbox is the execution-backend seam: one lifecycle-oriented
// contract for starting, observing, stopping and cleaning up OS processes,
// whatever runs them (plain process groups, bubblewrap, an OCI runtime).
//
// The seam knows nothing of wasm, capsules or principals. Its spec is fully
// explicit: every limit, directory and bound is given by the caller and a
// missing one is refused, so defaults live in exactly one place, the layer
// above (registry).
//
// Output is captured by the backend into an OutputLog per stream: an
// in-memory ring with absolute byte offsets, spilled to a private file, read
// without draining by any number of readers.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// ErrNoTerminal: a terminal operation on a process without a terminal,
// or whose terminal is gone.
var ErrNoTerminal = errors.New("process has no terminal")

// Backend starts and manages processes. Implementations: local, bwrap, oci.
type Backend interface {
	// Name is the backend identifier carried in every Ref it issues.
	Name() string
	// Start returns once the process runs and its streams are attached
	// (transport readiness). A spawn failure is a *SpawnError.
	Start(ctx context.Context, spec ProcessSpec) (Handle, error)
	// Attach re-opens a Backend-lifetime process from its Ref. Handle-lifetime
	// refs give ErrNotFound once their handle is gone.
	Attach(ctx context.Context, ref Ref) (Handle, error)
	// Inspect reports the phase. An unreachable backend is ErrUnavailable,
	// never an "unknown" phase.
	Inspect(ctx context.Context, ref Ref) (Inspection, error)
	// Cleanup removes an exited or missing process's resources (spill files,
	// bundles, cgroups). Idempotent; never terminates anything; ErrRunning
	// while the process is known to run.
	Cleanup(ctx context.Context, ref Ref) error
}

// Handle is one attachment to a running or exited process.
type Handle interface {
	Ref() Ref
	// PID is advisory (the host PID of the root process, 0 if unknown).
	PID() int
	// Stdin is nil unless the spec asked for StdinOpen.
	Stdin() StdinPipe
	Stdout() Log
	Stderr() Log
	// Wait blocks until the process has settled (root exit plus bounded
	// drain) or ctx ends. Idempotent: every caller gets the same Exit. A lost
	// attachment is ErrUnavailable; ctx expiry returns ctx.Err().
	Wait(ctx context.Context) (Exit, error)
	// Done is closed once Wait would return without blocking.
	Done() <-chan struct{}
	// Signal sends sig to the process tree (the process group, or the
	// container). After exit it is a successful no-op that sends nothing.
	Signal(sig syscall.Signal) error
	// Terminate ends the tree. Graceful sends SIGTERM and waits up to the
	// spec's Grace, then returns ErrGracefulTimeout; it never escalates.
	// Force kills the whole tree, escaped descendants included. Idempotent;
	// after exit it sends nothing and returns the known Exit.
	Terminate(ctx context.Context, mode TerminateMode) (Exit, error)
	// Stats reports what the backend can measure; unknown fields are nil.
	Stats() Stats
	// Release drops this attachment without claiming the process exited.
	// A running Handle-lifetime process gives ErrNotDetachable.
	Release() error
}

// Log is the read side of one output stream, what the layers above read
// through a Handle. Two implementations with the same semantics: the
// in-process *OutputLog, and a keeper's log read over its socket
// (keeper.RemoteLog), so the registry reads a process the same way whether
// the daemon or a keeper holds it.
type Log interface {
	// ReadFrom reads from an absolute offset without consuming.
	ReadFrom(off int64, max int) (Chunk, error)
	// Drain reads from the log's own drain cursor and advances it.
	Drain(max int) (Chunk, error)
	// Ack says the reader is done with bytes before off (backpressure).
	Ack(off int64)
	// Changed is closed at the next change after the call (arm, then read
	// End: no lost wake-up).
	Changed() <-chan struct{}
	Closed() bool
	Dropped() int64
	End() int64
	Retained() int64
}

// StdinPipe is the write side of an open stdin: the in-process *Stdin, or
// a keeper's over its socket.
type StdinPipe interface {
	// Write writes all of p or fails; a failure after n > 0 bytes leaves
	// the stream torn (the caller closes it).
	Write(ctx context.Context, p []byte) (int, error)
	// Close closes stdin; idempotent.
	Close() error
	IsClosed() bool
}

var (
	_ Log       = (*OutputLog)(nil)
	_ StdinPipe = (*Stdin)(nil)
)

// Lifetime says whether a process can outlive its Handle.
type Lifetime int

const (
	// LifetimeHandle: owned by the attachment, not adoptable after it is
	// gone (local processes).
	LifetimeHandle Lifetime = iota + 1
	// LifetimeBackend: may outlive the attachment; Attach, Inspect and
	// Cleanup work from a fresh Backend value given only the Ref.
	LifetimeBackend
)

func (l Lifetime) String() string {
	switch l {
	case LifetimeHandle:
		return "handle"
	case LifetimeBackend:
		return "backend"
	}
	return "invalid"
}

// Ref names a process at the seam. ID is opaque: not a PID, a container ID
// or a path.
type Ref struct {
	Backend  string
	ID       string
	Lifetime Lifetime
}

// Phase of a process as Inspect sees it.
type Phase int

const (
	PhaseStarting Phase = iota + 1
	PhaseRunning
	PhaseExited
	PhaseMissing
)

func (p Phase) String() string {
	switch p {
	case PhaseStarting:
		return "starting"
	case PhaseRunning:
		return "running"
	case PhaseExited:
		return "exited"
	case PhaseMissing:
		return "missing"
	}
	return "invalid"
}

// Inspection is Inspect's answer. Exit is set iff Phase is PhaseExited, and
// is the same immutable Exit that Wait returns.
type Inspection struct {
	Phase Phase
	Exit  *Exit
}

// LimitKind names a resource limit.
type LimitKind string

const (
	LimitNone      LimitKind = ""
	LimitMemory    LimitKind = "memory"
	LimitCPU       LimitKind = "cpu"
	LimitPids      LimitKind = "pids"
	LimitOpenFiles LimitKind = "open-files"
)

// Exit is how a process ended. It carries no classification of why: the
// caller owns deadlines and knows whether it asked for a stop.
type Exit struct {
	// Code is the exit status when Signal is 0.
	Code int
	// Signal is the signal that ended the root process, or 0.
	Signal syscall.Signal
	// KilledFor is set when the backend knows the process was killed for a
	// limit (for example memory: the OOM killer).
	KilledFor LimitKind
	// At is when the root process exited.
	At time.Time
	// Lost is set when the backend lost the process rather than saw it
	// end: its keeper died, and a later one killed what was left (Signal
	// SIGKILL) or found it gone (Code -1, its real status unknown).
	Lost bool
}

// Lister is implemented by backends whose processes outlive the daemon
// (the keeper's): List names every process the backend holds, so the
// registry can end those that no journal entry owns.
type Lister interface {
	List(ctx context.Context) ([]Ref, error)
}

// TerminateMode selects graceful or forced termination.
type TerminateMode int

const (
	Graceful TerminateMode = iota + 1
	Force
)

// StdinMode selects what the process gets on stdin.
type StdinMode int

const (
	// StdinClosed: stdin is at EOF from the start.
	StdinClosed StdinMode = iota + 1
	// StdinBytes: Stdin.Data is written, then stdin is closed.
	StdinBytes
	// StdinOpen: Stdin.Data (may be empty) is written, then stdin stays
	// open for Handle.Stdin().
	StdinOpen
)

type StdinSpec struct {
	Mode StdinMode
	Data []byte
}

// Overflow is what a full output log does.
type Overflow int

const (
	// DropOldest evicts the oldest bytes from memory; they stay readable
	// from the spill file up to SpillBytes, and only beyond it are reported
	// as dropped.
	DropOldest Overflow = iota + 1
	// Backpressure stops reading the pipe while RingBytes are unacknowledged,
	// so the writer blocks. It never blocks the host.
	Backpressure
)

// OutputSpec configures the log of each output stream.
type OutputSpec struct {
	// RingBytes is the in-memory window per stream (> 0).
	RingBytes int
	// SpillBytes caps the spill file per stream (>= 0; 0 disables spill).
	SpillBytes int64
	Overflow   Overflow
	// SpillDir is an existing directory; the backend creates a private 0700
	// directory inside it per process, removed on Cleanup.
	SpillDir string
	// Rate bounds each stream's capture rate (zero: unbounded): a stream
	// over it is throttled, never truncated (OutputRate).
	Rate OutputRate
}

// Limits are resource limits; a zero field means "no limit". A limit the
// backend cannot enforce fails Start with ErrLimitsUnsupported naming it.
type Limits struct {
	MemoryBytes int64
	CPUTime     time.Duration
	Pids        int
	OpenFiles   int
}

// TerminalSpec asks for the process to run on a pseudo-terminal: its
// stdin, stdout and stderr are the PTY's slave, it is the session leader
// with the slave as its controlling terminal, and the master feeds the
// stdout log (stderr's log stays empty and is closed at once) and takes
// Handle.Stdin's writes. Only backends that call ValidateTerminal accept
// it (local, bwrap); the others refuse it with ErrInvalidSpec.
type TerminalSpec struct {
	// Rows and Cols are the initial window size, 1..MaxTerminalSize.
	Rows, Cols uint16
	// Term is the TERM variable the process gets (it replaces one in Env).
	Term string
}

// MaxTerminalSize bounds rows and columns: a bigger window is a mistake
// or an attack on the screen model's memory.
const MaxTerminalSize = 1000

// Resizer is implemented by the handles of terminal processes: Resize
// sets the window size (TIOCSWINSZ on the master; the kernel signals
// SIGWINCH to the terminal's foreground process group). A size outside
// 1..MaxTerminalSize is ErrInvalidSpec; a handle without a terminal, or
// whose terminal is gone (the process ended), is ErrNoTerminal.
type Resizer interface {
	Resize(rows, cols uint16) error
}

// AfterDoner is implemented by handles that can call a function once
// the process has settled (Done closed), so that a follower of many
// processes (the keeper) parks no goroutine per process to learn of
// exits. The local backend's handles are, and bwrap's, which are local's.
type AfterDoner interface {
	AfterDone(f func())
}

// CheckTerminalSize refuses a window size outside 1..MaxTerminalSize,
// naming the field, with ErrInvalidSpec.
func CheckTerminalSize(rows, cols uint16) error {
	if rows < 1 || rows > MaxTerminalSize {
		return fmt.Errorf("terminal.rows: %d is not in 1..%d: %w", rows, MaxTerminalSize, ErrInvalidSpec)
	}
	if cols < 1 || cols > MaxTerminalSize {
		return fmt.Errorf("terminal.cols: %d is not in 1..%d: %w", cols, MaxTerminalSize, ErrInvalidSpec)
	}
	return nil
}

// check validates a terminal spec: its size, a TERM without NUL or
// "=", and stdin open (a PTY's input is the master; "closed" or "bytes"
// stdin would hang it up or leave nothing to drive it with).
func (t *TerminalSpec) check(stdin StdinMode) error {
	if err := CheckTerminalSize(t.Rows, t.Cols); err != nil {
		return err
	}
	if t.Term == "" || strings.ContainsAny(t.Term, "=\x00") {
		return fmt.Errorf("terminal.term: %q is empty or holds '=' or NUL: %w", t.Term, ErrInvalidSpec)
	}
	if stdin != StdinOpen {
		return fmt.Errorf("terminal: needs stdin mode open: %w", ErrInvalidSpec)
	}
	return nil
}

// IsolationSpec is what a sandboxing backend needs from the caller. The
// local backend ignores Network and Profile but still honours Workspace
// through Cwd.
type IsolationSpec struct {
	// Workspace is the absolute host directory bound read-write.
	Workspace string
	// Network grants network access (bwrap: --share-net; oci: the profile's
	// network mode permitting).
	Network bool
	// Profile names an OCI launch profile of the host config.
	Profile string
}

// ProcessSpec is a fully explicit spawn request. Nothing here has a hidden
// default: zero values are refused with ErrInvalidSpec naming the field,
// except where a field documents zero as meaningful.
type ProcessSpec struct {
	// Argv is the program and its arguments; never shell-interpreted.
	// Argv[0] must be an absolute path.
	Argv []string
	// Path is the file to execute: absolute, already resolved (no
	// symlink on the way); empty means Argv[0]. The registry sets it to
	// the file its exec-list check resolved, so what was checked is what
	// runs: a symlink on the way to Argv[0] that a guest swaps after the
	// check changes nothing. Argv[0] stays the name the program is
	// invoked by (a multi-call binary reads it). Backends that run in an
	// image root (OCI) exec by name and ignore it; see CheckExecPath.
	Path string
	// Cwd is an absolute host path, already confined by ConfineCwd.
	Cwd string
	// Env is the final, already-scrubbed environment (KEY=VALUE).
	Env    []string
	Stdin  StdinSpec
	Output OutputSpec
	// Grace bounds graceful termination (> 0).
	Grace time.Duration
	// Drain bounds how long output is still collected after the root
	// process exits while a descendant holds the pipes (> 0).
	Drain     time.Duration
	Limits    Limits
	Terminal  *TerminalSpec
	Isolation IsolationSpec
	// Label is for logs only.
	Label string
}

// Stats are what a backend could measure; nil means unknown, never zero.
type Stats struct {
	CPUTime    *time.Duration
	MemoryPeak *int64
}

package journal

import (
	"encoding/hex"
	"time"
)

// Key is a process's journal key: the registry's keyed blake2b-256 hash
// of its ID. The journal never sees the ID itself, so it cannot write it.
type Key [32]byte

// Short is the log form of a key: the hex of its first 6 bytes, enough to
// correlate lines and short enough to keep them readable.
func (k Key) Short() string { return hex.EncodeToString(k[:6]) }

// Owner is who a process, and a scope of event sequences, belongs to.
// Fallback is part of the identity (the registry's owner-fallback callers
// never share state with a real principal of the same name).
type Owner struct {
	Capsule   string
	Principal string
	Fallback  bool
}

// Process is the journaled state of one persistent process: what the
// daemon needs after a restart to re-attach it through its backend and to
// go on enforcing ownership, quotas and deadlines. Deadlines are absolute
// wall-clock times, because a monotonic clock does not survive the
// process that read it; the zero time means "none".
type Process struct {
	Key     Key
	Owner   Owner
	Label   string
	Command string
	Args    []string
	Backend BackendRef
	Limits  Limits
	Stdin   StdinMode
	// Overflow and RingBytes are the output logs' policy, needed to
	// rebuild them on re-attach.
	Overflow  Overflow
	RingBytes int
	// Drain is the per-stream offset up to which output was delivered
	// (index Stdout, Stderr), so reads continue where they stopped.
	Drain [2]int64

	Started          time.Time
	LifetimeDeadline time.Time // Started + max lifetime
	IdleTimeout      time.Duration
	IdleDeadline     time.Time // last touch + IdleTimeout (Touch moves it)
	ExitRetention    time.Duration
	// RetentionDeadline is Exit.At + ExitRetention once the exit is known.
	RetentionDeadline time.Time

	// Exit is nil while the process runs.
	Exit *Exit
	// Reason is why it ended (or is being ended); "" while unclaimed.
	Reason Reason
	// SealedID is the process ID sealed by the registry (AEAD under a key
	// the journal never sees), so a restarted daemon can name its
	// processes in lists and events again while no file holds an ID in
	// plaintext. Opaque here; nil for none.
	SealedID []byte
	// Terminal is the process's PTY (its current size and TERM), so a
	// restarted daemon rebuilds its screen; nil: pipes.
	Terminal *Terminal
}

// Terminal is a terminal process's window: its size at spawn (rows and
// cols 1..1000), TERM, and the resizes since, in output order, so a
// replay of the output log resizes the screen where the live one did.
type Terminal struct {
	Rows, Cols uint16
	Term       string
	Resizes    []Resize
}

// Resize is one window change: from output offset At on, Rows x Cols.
type Resize struct {
	At         int64
	Rows, Cols uint16
}

// MaxResizes bounds a terminal's resize history (the oldest go first).
const MaxResizes = 64

// BackendRef is sandbox.Ref in plain fields.
type BackendRef struct {
	Name     string
	ID       string
	Lifetime Lifetime
}

// Limits is sandbox.Limits in plain fields; zero means unlimited.
type Limits struct {
	MemoryBytes int64
	CPUTime     time.Duration
	Pids        int
	OpenFiles   int
}

// Exit is how the process ended, the shape of registry.Exit: Code or
// Signal, or neither when the backend lost the process.
type Exit struct {
	Code      *int32
	Signal    *int32
	KilledFor string // the backend's limit kind ("memory", ...) or ""
	At        time.Time
}

// Stream indexes Process.Drain; the values are the registry's.
type Stream int

const (
	Stdout Stream = 0
	Stderr Stream = 1
)

// The enumerations below are strings on disk, not the Go constants'
// numbers: reordering a Go const block must never change what an old
// journal means.

// Lifetime is sandbox.Lifetime.
type Lifetime string

const (
	LifetimeHandle  Lifetime = "handle"
	LifetimeBackend Lifetime = "backend"
)

// StdinMode is sandbox.StdinMode.
type StdinMode string

const (
	StdinClosed StdinMode = "closed"
	StdinBytes  StdinMode = "bytes"
	StdinOpen   StdinMode = "open"
)

// Overflow is sandbox.Overflow.
type Overflow string

const (
	DropOldest   Overflow = "drop-oldest"
	Backpressure Overflow = "backpressure"
)

// Reason is registry.Reason, by the registry's names for it.
type Reason string

const (
	ReasonNone     Reason = ""
	ReasonSelfExit Reason = "self-exit"
	ReasonStopped  Reason = "stopped"
	ReasonKilled   Reason = "killed"
	ReasonLifetime Reason = "lifetime"
	ReasonIdle     Reason = "idle"
	ReasonEvicted  Reason = "evicted"
	ReasonRemoved  Reason = "removed"
)

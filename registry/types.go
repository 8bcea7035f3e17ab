package registry

import (
	"log/slog"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
)

// Config is the host-wide registry configuration. Zero fields take the
// documented defaults (DefaultConfig); the host config can change them.
type Config struct {
	// Backends by name: "local", "bwrap", "oci".
	Backends map[string]sandbox.Backend
	// Policies describe the Backends as data, by the same names: whoever
	// constructs a backend (the daemon) says here whether its commands run
	// inside a root, and what its launch profiles allow. The registry
	// decides from these fields, never from a backend's name; the host
	// checks manifests against them (Registry.Policies). A backend
	// without an entry has the zero policy: commands resolve on the host.
	Policies map[string]sandbox.BackendPolicy
	// HostEnv is the host environment a process's environment starts
	// from (its allowlisted entries: PATH, LANG, ...; see
	// sandbox.BuildEnv). Its PATH is the only one a process gets and the
	// one the exec check looks bare names up on (HostPath): a guest
	// cannot set PATH. The daemon passes os.Environ() with PATH replaced by
	// the configured one; nil: none.
	HostEnv []string
	// StateDir holds spill files (a private subdirectory per process).
	StateDir string
	// Persistent are the backends of persistent spawns, by the capsule's
	// backend name, when they differ from Backends: the daemon's
	// keeper-backed ones, whose processes outlive it. A name without an
	// entry spawns persistent processes on Backends.
	Persistent map[string]sandbox.Backend
	// Journal, when set, makes persistent processes durable: every spawn
	// is journaled before its ID is returned, exits and forgets are
	// recorded, and Adopt takes back what an earlier daemon left. The
	// registry does not close it.
	Journal *journal.Journal
	// Keys, when set, are the registry's secret keys (persisted by the
	// daemon in the state directory), so IDs and cursors issued before a
	// restart stay valid; nil: fresh random keys for this run.
	Keys     *Keys
	Quotas   Quotas
	Defaults Defaults
	Logger   *slog.Logger

	// Directory, when set, is where reservations, process records and
	// the quota counters also live (registry/etcddir: cluster mode); nil:
	// a LocalDirectory, today's single-node behaviour.
	Directory Directory
	// DirectoryKey keys the hash that names a process in the directory,
	// the same on every node of a cluster (an ID found through any node);
	// nil: Keys.Hash. Kept apart from Keys.Hash so a state directory's
	// journal stays valid when it joins a cluster.
	DirectoryKey *[32]byte
	// Forwarder, when set, carries a call for a process another node
	// holds to that node (directory_forward.go); nil: such a call answers
	// unavailable naming the node.
	Forwarder Forwarder
	// NodeCapacity caps the processes of both tiers running on this node
	// at once (ErrNodeFull beyond it); 0: no cap. Placement reads it.
	NodeCapacity int
	// Placement picks the node a persistent spawn runs on (placement.go);
	// "": PlaceLocalFirst. Only with a Forwarder.
	Placement Placement
}

// Keys are the registry's secrets: Hash keys the ID → map-key hash, MAC
// the cursor tokens, Seal the AEAD of IDs in the journal.
type Keys struct {
	Hash, MAC, Seal [32]byte
}

// Quotas are per-capsule caps. A manifest can only lower the host's.
type Quotas struct {
	// MaxConcurrent running processes per (capsule, principal), both tiers.
	MaxConcurrent int // default 8
	// MaxRetained IDs per (capsule, principal): live plus exited-unreleased.
	MaxRetained int // default 32
	// MaxEntries per capsule, all principals.
	MaxEntries int // default 256
}

// Defaults are the host's defaults and ceilings for process options.
type Defaults struct {
	LogRingBytes int   // default 1 MiB, clamped to [4 KiB, 8 MiB]
	SpillBytes   int64 // default 64 MiB per stream
	// OutputRate bounds each stream's capture rate: a chatty process is
	// throttled (its writes block), never truncated, so it cannot take
	// the pumps' CPU or the spill disk's bandwidth from everyone else.
	// Default 4 MiB/s with a 16 MiB burst; a negative BytesPerSec turns
	// it off.
	OutputRate      sandbox.OutputRate
	MaxLifetime     time.Duration // default and ceiling 6 h
	IdleTimeout     time.Duration // default 30 min
	ExitRetention   time.Duration // default 5 min, ceiling 1 h
	WaitCap         time.Duration // default 60 s
	StopGrace       time.Duration // default 5 s
	StopGraceCap    time.Duration // default 30 s
	SpawnTimeout    time.Duration // ceiling of the blocking spawn, default 10 min
	Drain           time.Duration // bounded drain after exit, default 2 s
	StdinWriteMax   int           // default 1 MiB
	StdinPreludeMax int           // default 4 MiB
	ReadMax         int           // read-since clamp, default 4 MiB
	EventRetention  int           // events kept per (capsule, principal), default 1024
	ReapInterval    time.Duration // reaper tick, default 1 s
}

// CapsulePolicy is what the registry enforces for one capsule, derived
// from its manifest by the host.
type CapsulePolicy struct {
	// Exec lists the allowed executables as absolute paths. A command
	// matches an entry when both resolve to the same file AND it is
	// invoked by the entry's base name (a multi-call binary such as
	// busybox picks its applet from argv[0]); exactly, never by prefix.
	Exec            []string
	AllowPersistent bool
	Backend         string // a key of Config.Backends
	Network         bool
	Profile         string // launch profile (sandbox.BackendPolicy.Profiles)
	// Workspace is the absolute directory processes run in (cwd root).
	Workspace string
	// Quotas: zero fields mean the host's; larger values are clamped down.
	Quotas Quotas
	// Limits applied to every process of the capsule (a guest can only
	// tighten them).
	Limits sandbox.Limits
	// OutputRate is the capsule's capture rate per stream in bytes/s
	// (0: the host's Defaults.OutputRate); it can only lower the host's.
	OutputRate int64
	// Env holds extra KEY=VALUE pairs granted by the operator (rarely used).
	Env []string
	// ExecRoot, when set, is the host directory the capsule's processes
	// see as "/" (the launch profile's sandbox.Profile.ExecRoot): Exec
	// entries are paths inside it, a command is looked up and resolved
	// inside it, and argv[0] is the in-root path (see execroot.go).
	// Empty: commands are resolved on the host, unless the backend's
	// policy says they run in a root (ExecInRoot), which refuses spawns.
	ExecRoot string
	// ExecHidden lists in-root paths the sandbox mounts over
	// (sandbox.Profile.ExecHidden): the image's content there is not what
	// a process would run, so no command may resolve there. Only with
	// ExecRoot.
	ExecHidden []string
	// WorkspaceOwner, when set, owns each principal's workspace directory
	// (chowned on every spawn): the host uid:gid the sandboxed process
	// runs as, e.g. a user-namespaced profile's mapped root
	// (sandbox.Profile.WorkspaceOwner).
	WorkspaceOwner *Owner
}

// Owner is a numeric host uid and gid.
type Owner = sandbox.Owner

// EnvVar is one guest-supplied environment entry.
type EnvVar struct{ Key, Value string }

// SpawnRequest mirrors the WIT spawn-request.
type SpawnRequest struct {
	Cmd      string
	Args     []string
	Stdin    []byte // nil: none
	HasStdin bool
	Env      []EnvVar
	Cwd      string // "" : workspace root
	Timeout  *time.Duration
}

// Overflow mirrors the WIT overflow-policy.
type Overflow = sandbox.Overflow

// PersistOptions mirrors the WIT persist-options; nil pointers take the
// host defaults.
type PersistOptions struct {
	Label         *string
	KeepStdinOpen bool
	Overflow      Overflow // 0 means DropOldest
	LogRingBytes  *uint32
	MaxLifetime   *time.Duration
	IdleTimeout   *time.Duration
	ExitRetention *time.Duration
	Limits        Limits
	Terminal      *TerminalOptions // a PTY (terminal.go); nil: pipes
}

// Limits mirrors the WIT resource-limits; nil: the capsule's default.
type Limits struct {
	MaxMemoryBytes *uint64
	MaxCPU         *time.Duration
	MaxPids        *uint32
	MaxOpenFiles   *uint32
}

// Exit mirrors the WIT exit-info.
type Exit struct {
	Code   *int32
	Signal *int32
}

// ExitFrom converts a seam exit.
func ExitFrom(e sandbox.Exit) Exit {
	if e.Signal != 0 {
		s := int32(e.Signal)
		return Exit{Signal: &s}
	}
	c := int32(e.Code)
	return Exit{Code: &c}
}

// Result mirrors the WIT process-result.
type Result struct {
	Stdout, Stderr []byte
	Exit           Exit
	Truncated      bool
}

// Logs mirrors the WIT read-logs-result.
type Logs struct {
	Stdout, Stderr []byte
	Running        bool
	Exit           *Exit
	BytesDropped   uint64
}

// Stream mirrors the WIT log-stream.
type Stream int

const (
	Stdout Stream = iota
	Stderr
)

// LogChunk mirrors the WIT log-chunk. Times is not in the WIT: only the
// operator API carries it (logs --since, --timestamps, merged order).
type LogChunk struct {
	Data         []byte
	Next         string
	BytesDropped uint64
	EOF          bool
	Times        []LogTime
}

// LogTime: Data[At:] up to the next LogTime was captured at UnixNano.
// Bytes before the first LogTime have no recorded time.
type LogTime struct {
	At       int
	UnixNano int64
}

// Phase mirrors the WIT process-phase.
type Phase int

const (
	PhaseStarting Phase = iota
	PhaseRunning
	PhaseExited
)

// Reason mirrors the WIT exit-reason.
type Reason int

const (
	ReasonSelfExit Reason = iota
	ReasonStopped
	ReasonKilled
	ReasonLifetime
	ReasonIdle
	ReasonEvicted
	ReasonRemoved
)

// Info mirrors the WIT process-info.
type Info struct {
	ID            string
	Node          string   // the node holding it in cluster mode; "" on a single node
	Capsule       string   // operator views only; the WIT record omits it
	Principal     string   // operator views only
	Args          []string // operator views only: argv after Command
	Label         string
	Command       string
	OSPid         *uint32
	Phase         Phase
	Exit          *Exit
	Reason        *Reason
	Age, Idle     time.Duration
	BufferedBytes uint64
	BytesDropped  uint64
	StdinOpen     bool
	CPU           *time.Duration
	MemPeak       *uint64
	// 1.2.0 (info.go): nil when not applicable or unknown.
	Terminal        *TerminalInfo
	WaitingForInput *bool // sampled by Status and OperatorStatus only (info.go)
	ReapIn          *time.Duration
	ReapRule        *Reason
}

// Signal mirrors the WIT process-signal (1.1.0).
type Signal int

const (
	SigTerm Signal = iota
	SigHup
	SigInt
	SigUsr1
	SigUsr2
	SigStop
	SigCont
	SigKill
)

// Unix returns the OS signal.
func (s Signal) Unix() syscall.Signal {
	return [...]syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGSTOP, syscall.SIGCONT, syscall.SIGKILL}[s]
}

// EventKind mirrors the WIT event-kind discriminant.
type EventKind int

const (
	EventExited EventKind = iota
	EventLogReady
	EventStdinDrained
)

// Event mirrors the WIT process-event.
type Event struct {
	Seq    uint64
	ID     string
	Kind   EventKind
	Exit   Exit   // EventExited
	Reason Reason // EventExited
	Stream Stream // EventLogReady
}

// EventBatch mirrors the WIT event-batch.
type EventBatch struct {
	Events []Event
	Next   uint64
	Missed uint64
}

// OperatorFilter selects processes for the operator view (empty: all).
type OperatorFilter struct {
	Capsule, Principal string
	// Brief leaves out what asks the backend (buffered and dropped bytes,
	// CPU, memory, PID): a count or a log line per process needs only
	// the identity, owner and phase, and a keeper-held process's full
	// snapshot is five round trips to its keeper.
	Brief bool
}

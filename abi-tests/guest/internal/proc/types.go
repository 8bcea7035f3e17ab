// Package proc is a hand-written, independent Canonical ABI binding of
// capsule:process (1.0.0 and 1.1.0) for standard Go (GOOS=wasip1
// GOARCH=wasm), used by the end-to-end conformance guests.
//
// Why hand-written: wit-bindgen-go v0.7.0's output needs a 32-bit Go (its
// cm types and pointer parameters assume wasm32), so it cannot run on
// standard Go's wasm port. This binding mirrors that generated API (type
// and function names) but lowers and lifts with explicit byte offsets. It
// is written from the Canonical ABI, independently of the host's
// host/internal/cabi and of capsules/sdk, and its offsets are checked
// against go.bytecodealliance.org/wit's layouts by TestGuestLayouts.
package proc

import "go.bytecodealliance.org/cm"

// ErrorCode is the WIT variant error-code (1.0.0's first ten cases, plus
// 1.1.0's four).
type ErrorCode struct {
	tag uint8
	s   string
	n   uint64
}

var errorCaseNames = []string{
	"capability-denied", "invalid-input", "boundary-escape", "quota", "too-large",
	"closed", "cancelled", "wait-timeout", "unavailable", "internal",
	"no-such-process", "registry-full", "persist-unsupported", "torn-write",
}

// errorCaseHasString marks the cases with a string payload.
var errorCaseHasString = map[uint8]bool{0: true, 1: true, 2: true, 4: true, 8: true, 9: true}

const errTornWrite = 13

// String is the case name.
func (e ErrorCode) String() string {
	if int(e.tag) < len(errorCaseNames) {
		return errorCaseNames[e.tag]
	}
	return "invalid-error-code"
}

func (e *ErrorCode) str(tag uint8) *string {
	if e.tag == tag {
		return &e.s
	}
	return nil
}

func (e *ErrorCode) CapabilityDenied() *string { return e.str(0) }
func (e *ErrorCode) InvalidInput() *string     { return e.str(1) }
func (e *ErrorCode) BoundaryEscape() *string   { return e.str(2) }
func (e *ErrorCode) TooLarge() *string         { return e.str(4) }
func (e *ErrorCode) Unavailable() *string      { return e.str(8) }
func (e *ErrorCode) Internal() *string         { return e.str(9) }

// TornWrite is the byte count of a torn stdin write (1.1.0).
func (e *ErrorCode) TornWrite() *uint64 {
	if e.tag == errTornWrite {
		return &e.n
	}
	return nil
}

// Result is a WIT result<T, error-code>, shaped like cm.Result.
type Result[T any] struct {
	ok    T
	err   ErrorCode
	isErr bool
}

func (r *Result[T]) IsErr() bool { return r.isErr }
func (r *Result[T]) IsOK() bool  { return !r.isErr }

// OK is the ok payload, or nil.
func (r *Result[T]) OK() *T {
	if r.isErr {
		return nil
	}
	return &r.ok
}

// Err is the error, or nil.
func (r *Result[T]) Err() *ErrorCode {
	if !r.isErr {
		return nil
	}
	return &r.err
}

type ProcessSignal uint8

const (
	ProcessSignalTerm ProcessSignal = iota
	ProcessSignalHup
	ProcessSignalInt
	ProcessSignalUsr1
	ProcessSignalUsr2
	ProcessSignalStop // 1.1.0
	ProcessSignalCont // 1.1.0
	ProcessSignalKill // 1.1.0
)

type EnvVar struct {
	Key   string
	Value string
}

type SpawnRequest struct {
	Cmd       string
	Args      cm.List[string]
	Stdin     cm.Option[cm.List[uint8]]
	Env       cm.List[EnvVar]
	CWD       cm.Option[string]
	TimeoutMs cm.Option[uint64]
}

type ExitInfo struct {
	ExitCode cm.Option[int32] `json:"exit-code"`
	Signal   cm.Option[int32] `json:"signal"`
}

type ProcessResult struct {
	Stdout    cm.List[uint8]
	Stderr    cm.List[uint8]
	Exit      ExitInfo
	Truncated bool
}

type ReadLogsResult struct {
	Stdout       cm.List[uint8]
	Stderr       cm.List[uint8]
	Running      bool
	Exit         cm.Option[ExitInfo]
	BytesDropped uint64
}

// Types of the persistent tier (1.1.0).

type ProcessID string

type OverflowPolicy uint8

const (
	OverflowPolicyDropOldest OverflowPolicy = iota
	OverflowPolicyBackpressure
)

type ResourceLimits struct {
	MaxMemoryBytes cm.Option[uint64]
	MaxCPUMs       cm.Option[uint64]
	MaxPids        cm.Option[uint32]
	MaxOpenFiles   cm.Option[uint32]
}

type PersistOptions struct {
	Label           cm.Option[string]
	KeepStdinOpen   bool
	Overflow        OverflowPolicy
	LogRingBytes    cm.Option[uint32]
	MaxLifetimeMs   cm.Option[uint64]
	IdleTimeoutMs   cm.Option[uint64]
	ExitRetentionMs cm.Option[uint64]
	Limits          ResourceLimits
}

type ProcessPhase uint8

const (
	ProcessPhaseStarting ProcessPhase = iota
	ProcessPhaseRunning
	ProcessPhaseExited
)

type LogStream uint8

const (
	LogStreamStdout LogStream = iota
	LogStreamStderr
)

type ExitReason uint8

const (
	ExitReasonSelfExit ExitReason = iota
	ExitReasonStopped
	ExitReasonKilled
	ExitReasonLifetime
	ExitReasonIdle
	ExitReasonEvicted
	ExitReasonRemoved
)

type LogChunk struct {
	Data         cm.List[uint8]
	Next         string
	BytesDropped uint64
	EOF          bool
}

type ProcessInfo struct {
	ID            ProcessID
	Label         string
	Command       string
	OsPid         cm.Option[uint32]
	Phase         ProcessPhase
	Exit          cm.Option[ExitInfo]
	ExitReason    cm.Option[ExitReason]
	AgeMs         uint64
	IdleMs        uint64
	BufferedBytes uint64
	BytesDropped  uint64
	StdinOpen     bool
	CPUMs         cm.Option[uint64]
	MemBytesPeak  cm.Option[uint64]
}

type ExitEvent struct {
	Exit   ExitInfo
	Reason ExitReason
}

// EventKind is the WIT variant event-kind.
type EventKind struct {
	tag    uint8
	exited ExitEvent
	stream LogStream
}

func (k *EventKind) Exited() *ExitEvent {
	if k.tag == 0 {
		return &k.exited
	}
	return nil
}

func (k *EventKind) LogReady() *LogStream {
	if k.tag == 1 {
		return &k.stream
	}
	return nil
}

func (k *EventKind) StdinDrained() bool { return k.tag == 2 }

type ProcessEvent struct {
	Seq  uint64
	ID   ProcessID
	Kind EventKind
}

type EventBatch struct {
	Events cm.List[ProcessEvent]
	Next   uint64
	Missed uint64
}

// Package api holds the Go types of the capsule:process WIT contract:
// requests, results, process info, events, and the error codes as
// errors.Is sentinels. It is where go doc shows their fields; packages
// process (1.1.0), ephemeral (1.0.0) and terminal (1.2.0) re-export them
// under their own names, so a capsule rarely imports api itself.
package api

import (
	"fmt"
	"strconv"
)

// Code is an error-code case. 1.0.0 has the first ten; 1.1.0 all.
type Code uint8

// The WIT error-code cases in declaration order (the discriminant).
const (
	ErrCapabilityDenied Code = iota
	ErrInvalidInput
	ErrBoundaryEscape
	ErrQuota
	ErrTooLarge
	ErrClosed
	ErrCancelled
	ErrWaitTimeout
	ErrUnavailable
	ErrInternal
	ErrNoSuchProcess
	ErrRegistryFull
	ErrPersistUnsupported
	ErrTornWrite
)

var codeNames = [...]string{
	"capability-denied", "invalid-input", "boundary-escape", "quota",
	"too-large", "closed", "cancelled", "wait-timeout", "unavailable",
	"internal", "no-such-process", "registry-full", "persist-unsupported",
	"torn-write",
}

// String is the WIT case name.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "error-code(" + strconv.Itoa(int(c)) + ")"
}

// Error makes a Code usable as an errors.Is sentinel.
func (c Code) Error() string { return "capsule:process: " + c.String() }

// Error is an error-code the host returned. errors.Is(err, ErrQuota)
// (and so on) matches on the case.
type Error struct {
	Code Code `json:"code"`
	// Message is the host's explanation, for a person (cases with a string).
	Message string `json:"message,omitempty"`
	// Written is the torn-write payload: bytes that reached the process.
	Written uint64 `json:"written,omitempty"`
}

func (e *Error) Error() string {
	switch {
	case e.Code == ErrTornWrite:
		return fmt.Sprintf("%s: %d bytes reached the process", e.Code, e.Written)
	case e.Message != "":
		return e.Code.String() + ": " + e.Message
	}
	return e.Code.String()
}

// Unwrap exposes the Code for errors.Is.
func (e *Error) Unwrap() error { return e.Code }

// Signal is process-signal. 1.0.0 has the first five.
type Signal uint8

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

var signalNames = [...]string{"term", "hup", "int", "usr1", "usr2", "stop", "cont", "kill"}

func (s Signal) String() string {
	if int(s) < len(signalNames) {
		return signalNames[s]
	}
	return "signal(" + strconv.Itoa(int(s)) + ")"
}

// ParseSignal maps a WIT case name ("term", ...) to its Signal.
func ParseSignal(name string) (Signal, bool) {
	for i, n := range signalNames {
		if n == name {
			return Signal(i), true
		}
	}
	return 0, false
}

// EnvVar is env-var.
type EnvVar struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// SpawnRequest is spawn-request. Nil pointers (and a nil Stdin) are
// `none`; a non-nil empty Stdin is some(empty).
type SpawnRequest struct {
	Cmd       string   `json:"cmd"`
	Args      []string `json:"args"`
	Stdin     []byte   `json:"stdin,omitempty"`
	Env       []EnvVar `json:"env,omitempty"`
	Cwd       *string  `json:"cwd,omitempty"`
	TimeoutMS *uint64  `json:"timeout_ms,omitempty"`
}

// ExitInfo is exit-info: exactly one is set once a process has exited.
type ExitInfo struct {
	ExitCode *int32 `json:"exit_code,omitempty"`
	Signal   *int32 `json:"signal,omitempty"`
}

// ProcessResult is process-result.
type ProcessResult struct {
	Stdout    []byte   `json:"stdout"`
	Stderr    []byte   `json:"stderr"`
	Exit      ExitInfo `json:"exit"`
	Truncated bool     `json:"truncated"`
}

// ReadLogsResult is read-logs-result.
type ReadLogsResult struct {
	Stdout       []byte    `json:"stdout"`
	Stderr       []byte    `json:"stderr"`
	Running      bool      `json:"running"`
	Exit         *ExitInfo `json:"exit,omitempty"`
	BytesDropped uint64    `json:"bytes_dropped"`
}

// ID is process-id: 52 characters of [a-z2-7].
type ID = string

// Overflow is overflow-policy.
type Overflow uint8

const (
	DropOldest Overflow = iota
	Backpressure
)

// ResourceLimits is resource-limits; nil is the host default.
type ResourceLimits struct {
	MaxMemoryBytes *uint64 `json:"max_memory_bytes,omitempty"`
	MaxCPUMS       *uint64 `json:"max_cpu_ms,omitempty"`
	MaxPids        *uint32 `json:"max_pids,omitempty"`
	MaxOpenFiles   *uint32 `json:"max_open_files,omitempty"`
}

// PersistOptions is persist-options; nil is the host default.
type PersistOptions struct {
	Label           *string        `json:"label,omitempty"`
	KeepStdinOpen   bool           `json:"keep_stdin_open,omitempty"`
	Overflow        Overflow       `json:"overflow,omitempty"`
	LogRingBytes    *uint32        `json:"log_ring_bytes,omitempty"`
	MaxLifetimeMS   *uint64        `json:"max_lifetime_ms,omitempty"`
	IdleTimeoutMS   *uint64        `json:"idle_timeout_ms,omitempty"`
	ExitRetentionMS *uint64        `json:"exit_retention_ms,omitempty"`
	Limits          ResourceLimits `json:"limits"`
}

// Phase is process-phase.
type Phase uint8

const (
	PhaseStarting Phase = iota
	PhaseRunning
	PhaseExited
)

func (p Phase) String() string {
	return [...]string{"starting", "running", "exited", "phase?"}[min(int(p), 3)]
}

// LogStream is log-stream.
type LogStream uint8

const (
	Stdout LogStream = iota
	Stderr
)

func (s LogStream) String() string { return [...]string{"stdout", "stderr", "stream?"}[min(int(s), 2)] }

// ExitReason is exit-reason.
type ExitReason uint8

const (
	ReasonSelfExit ExitReason = iota
	ReasonStopped
	ReasonKilled
	ReasonLifetime
	ReasonIdle
	ReasonEvicted
	ReasonRemoved
)

func (r ExitReason) String() string {
	return [...]string{"self-exit", "stopped", "killed", "lifetime", "idle", "evicted", "removed", "reason?"}[min(int(r), 7)]
}

// LogChunk is log-chunk.
type LogChunk struct {
	Data         []byte `json:"data"`
	Next         string `json:"next"`
	BytesDropped uint64 `json:"bytes_dropped"`
	EOF          bool   `json:"eof"`
}

// ProcessInfo is process-info.
type ProcessInfo struct {
	ID            ID          `json:"id"`
	Label         string      `json:"label"`
	Command       string      `json:"command"`
	OSPid         *uint32     `json:"os_pid,omitempty"`
	Phase         Phase       `json:"phase"`
	Exit          *ExitInfo   `json:"exit,omitempty"`
	ExitReason    *ExitReason `json:"exit_reason,omitempty"`
	AgeMS         uint64      `json:"age_ms"`
	IdleMS        uint64      `json:"idle_ms"`
	BufferedBytes uint64      `json:"buffered_bytes"`
	BytesDropped  uint64      `json:"bytes_dropped"`
	StdinOpen     bool        `json:"stdin_open"`
	CPUMS         *uint64     `json:"cpu_ms,omitempty"`
	MemBytesPeak  *uint64     `json:"mem_bytes_peak,omitempty"`
}

// EventKind is the event-kind discriminant.
type EventKind uint8

const (
	EventExited EventKind = iota
	EventLogReady
	EventStdinDrained
)

func (k EventKind) String() string {
	return [...]string{"exited", "log-ready", "stdin-drained", "kind?"}[min(int(k), 3)]
}

// ExitEvent is exit-event.
type ExitEvent struct {
	Exit   ExitInfo   `json:"exit"`
	Reason ExitReason `json:"reason"`
}

// Event is process-event; Exit is set for EventExited, Stream for
// EventLogReady.
type Event struct {
	Seq    uint64     `json:"seq"`
	ID     ID         `json:"id"`
	Kind   EventKind  `json:"kind"`
	Exit   *ExitEvent `json:"exit,omitempty"`
	Stream LogStream  `json:"stream"`
}

// EventBatch is event-batch.
type EventBatch struct {
	Events []Event `json:"events"`
	Next   uint64  `json:"next"`
	Missed uint64  `json:"missed"`
}

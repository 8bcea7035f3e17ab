// Package wire is the Canonical ABI lowering and lifting of the
// capsule:process types (package api), shared by the 1.0.0, 1.1.0 and
// 1.2.0 bindings. The names below alias api's so the codec reads them
// unqualified.
package wire

import "github.com/capsule-host/capsule-host/capsules/sdk/api"

type (
	Code           = api.Code
	EnvVar         = api.EnvVar
	Error          = api.Error
	Event          = api.Event
	EventBatch     = api.EventBatch
	EventKind      = api.EventKind
	ExitEvent      = api.ExitEvent
	ExitInfo       = api.ExitInfo
	ExitReason     = api.ExitReason
	ID             = api.ID
	LogChunk       = api.LogChunk
	LogStream      = api.LogStream
	Overflow       = api.Overflow
	PersistOptions = api.PersistOptions
	Phase          = api.Phase
	ProcessInfo    = api.ProcessInfo
	ProcessResult  = api.ProcessResult
	ReadLogsResult = api.ReadLogsResult
	ResourceLimits = api.ResourceLimits
	Signal         = api.Signal
	SpawnRequest   = api.SpawnRequest
)

const (
	Backpressure          = api.Backpressure
	DropOldest            = api.DropOldest
	ErrBoundaryEscape     = api.ErrBoundaryEscape
	ErrCancelled          = api.ErrCancelled
	ErrCapabilityDenied   = api.ErrCapabilityDenied
	ErrClosed             = api.ErrClosed
	ErrInternal           = api.ErrInternal
	ErrInvalidInput       = api.ErrInvalidInput
	ErrNoSuchProcess      = api.ErrNoSuchProcess
	ErrPersistUnsupported = api.ErrPersistUnsupported
	ErrQuota              = api.ErrQuota
	ErrRegistryFull       = api.ErrRegistryFull
	ErrTooLarge           = api.ErrTooLarge
	ErrTornWrite          = api.ErrTornWrite
	ErrUnavailable        = api.ErrUnavailable
	ErrWaitTimeout        = api.ErrWaitTimeout
	EventExited           = api.EventExited
	EventLogReady         = api.EventLogReady
	EventStdinDrained     = api.EventStdinDrained
	PhaseExited           = api.PhaseExited
	PhaseRunning          = api.PhaseRunning
	PhaseStarting         = api.PhaseStarting
	ReasonEvicted         = api.ReasonEvicted
	ReasonIdle            = api.ReasonIdle
	ReasonKilled          = api.ReasonKilled
	ReasonLifetime        = api.ReasonLifetime
	ReasonRemoved         = api.ReasonRemoved
	ReasonSelfExit        = api.ReasonSelfExit
	ReasonStopped         = api.ReasonStopped
	SigCont               = api.SigCont
	SigHup                = api.SigHup
	SigInt                = api.SigInt
	SigKill               = api.SigKill
	SigStop               = api.SigStop
	SigTerm               = api.SigTerm
	SigUsr1               = api.SigUsr1
	SigUsr2               = api.SigUsr2
	Stderr                = api.Stderr
	Stdout                = api.Stdout
)

// ParseSignal is api.ParseSignal.
var ParseSignal = api.ParseSignal

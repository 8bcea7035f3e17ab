// Package process is the typed Go API over capsule:process/host@1.1.0:
// both the ephemeral tier (Spawn, SpawnBackground, Handle) and the
// persistent tier (SpawnPersistent, Attach, ReadSince, Stop, ...).
//
// Only the functions a capsule calls end up as imports of its module (the
// linker drops unreferenced //go:wasmimport functions). A capsule that must
// run on hosts serving only 1.0.0 uses package ephemeral instead.
//
// Errors are *Error values; match them with errors.Is(err, ErrQuota) etc.
// Calls are synchronous and must not be made concurrently from several
// goroutines (the host calls are not re-entrant).
package process

import (
	"github.com/capsule-host/capsule-host/capsules/sdk/api"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/proccore"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/wire"
)

// Types of the contract, mirrored from the WIT and defined in package
// api, where go doc shows their fields (go doc capsules/sdk/api SpawnRequest).
type (
	Code           = api.Code
	Error          = api.Error
	Signal         = api.Signal
	EnvVar         = api.EnvVar
	SpawnRequest   = api.SpawnRequest
	ExitInfo       = api.ExitInfo
	ProcessResult  = api.ProcessResult
	ReadLogsResult = api.ReadLogsResult
	ID             = api.ID
	Overflow       = api.Overflow
	ResourceLimits = api.ResourceLimits
	PersistOptions = api.PersistOptions
	Phase          = api.Phase
	LogStream      = api.LogStream
	ExitReason     = api.ExitReason
	LogChunk       = api.LogChunk
	ProcessInfo    = api.ProcessInfo
	EventKind      = api.EventKind
	ExitEvent      = api.ExitEvent
	Event          = api.Event
	EventBatch     = api.EventBatch
)

// errors.Is sentinels, one per error-code case.
const (
	ErrCapabilityDenied   = api.ErrCapabilityDenied
	ErrInvalidInput       = api.ErrInvalidInput
	ErrBoundaryEscape     = api.ErrBoundaryEscape
	ErrQuota              = api.ErrQuota
	ErrTooLarge           = api.ErrTooLarge
	ErrClosed             = api.ErrClosed
	ErrCancelled          = api.ErrCancelled
	ErrWaitTimeout        = api.ErrWaitTimeout
	ErrUnavailable        = api.ErrUnavailable
	ErrInternal           = api.ErrInternal
	ErrNoSuchProcess      = api.ErrNoSuchProcess
	ErrRegistryFull       = api.ErrRegistryFull
	ErrPersistUnsupported = api.ErrPersistUnsupported
	ErrTornWrite          = api.ErrTornWrite
)

// Signals (process-signal of 1.1.0).
const (
	SigTerm = api.SigTerm
	SigHup  = api.SigHup
	SigInt  = api.SigInt
	SigUsr1 = api.SigUsr1
	SigUsr2 = api.SigUsr2
	SigStop = api.SigStop
	SigCont = api.SigCont
	SigKill = api.SigKill
)

// Enum values.
const (
	DropOldest        = api.DropOldest
	Backpressure      = api.Backpressure
	Stdout            = api.Stdout
	Stderr            = api.Stderr
	PhaseStarting     = api.PhaseStarting
	PhaseRunning      = api.PhaseRunning
	PhaseExited       = api.PhaseExited
	EventExited       = api.EventExited
	EventLogReady     = api.EventLogReady
	EventStdinDrained = api.EventStdinDrained
	ReasonSelfExit    = api.ReasonSelfExit
	ReasonStopped     = api.ReasonStopped
	ReasonKilled      = api.ReasonKilled
	ReasonLifetime    = api.ReasonLifetime
	ReasonIdle        = api.ReasonIdle
	ReasonEvicted     = api.ReasonEvicted
	ReasonRemoved     = api.ReasonRemoved
)

// ParseSignal maps a WIT case name ("term", "kill", ...) to its Signal.
func ParseSignal(name string) (Signal, bool) { return api.ParseSignal(name) }

// Ptr returns &v, for the optional fields of requests and options.
func Ptr[T any](v T) *T { return &v }

// v11 is this version's error-code.
var v11 = &proccore.Version{EC: wire.LErrorCode11, Cases: 14}

// Result layouts of the functions, by ok payload.
var (
	lHandle = abi.Handle
	lU32    = abi.U32
	lID     = abi.String
	lList   = abi.List()
)

func liftString(l *abi.Lifter, b []byte, off uint32) string { return l.String(b, off, "string") }

// Spawn runs a process to completion and returns its output.
func Spawn(req SpawnRequest) (ProcessResult, error) { return proccore.Spawn(v11, &req, impSpawn) }

// Handle is an instance-scoped process handle: owning (SpawnBackground,
// dropping kills) or a view (Attach, dropping detaches). It is valid only
// within the tool call that made it: the instance is reset afterwards.
type Handle struct{ h uint32 }

// SpawnBackground starts a process owned by this instance.
func SpawnBackground(req SpawnRequest) (*Handle, error) {
	h, err := proccore.SpawnBackground(v11, &req, impSpawnBackground)
	if err != nil {
		return nil, err
	}
	return &Handle{h: h}, nil
}

// SpawnPersistent starts a process in the caller's registry and returns
// its ID.
func SpawnPersistent(req SpawnRequest, opts PersistOptions) (ID, error) {
	s := &abi.Scope{}
	defer s.Free()
	t := wire.LSpawnPersistentParams
	pp, pb := s.Alloc(t.Size, t.Align)
	wire.StoreSpawnRequest(s, pb, t.Offs[0], &req)
	wire.StorePersistOptions(s, pb, t.Offs[1], &opts)
	return proccore.Call(v11, s, &lID, liftString, func(rp uint32) { impSpawnPersistent(pp, rp) })
}

// Attach returns a view handle on a persistent process.
func Attach(id ID) (*Handle, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	h, err := proccore.Call(v11, s, &lHandle, proccore.LiftU32, func(rp uint32) { impAttach(ip, il, rp) })
	if err != nil {
		return nil, err
	}
	return &Handle{h: h}, nil
}

// ListProcesses lists the caller's processes whose label contains
// labelFilter (nil: all).
func ListProcesses(labelFilter *string) ([]ProcessInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	d, p, n := s.OptStr(labelFilter)
	return proccore.Call(v11, s, &lList, wire.LiftProcessInfos, func(rp uint32) { impListProcesses(d, p, n, rp) })
}

// Status is a snapshot of one process.
func Status(id ID) (ProcessInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Call(v11, s, &wire.LProcessInfo, wire.LiftProcessInfo, func(rp uint32) { impStatus(ip, il, rp) })
}

// StatusMany snapshots several processes; unknown IDs are absent.
func StatusMany(ids []ID) ([]ProcessInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Strs(ids)
	return proccore.Call(v11, s, &lList, wire.LiftProcessInfos, func(rp uint32) { impStatusMany(ip, il, rp) })
}

// ReadSince reads one stream from cursor (nil: the start) without
// draining, at most maxBytes.
func ReadSince(id ID, stream LogStream, cursor *string, maxBytes uint32) (LogChunk, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	d, cp, cl := s.OptStr(cursor)
	return proccore.Call(v11, s, &wire.LLogChunk, wire.LiftLogChunk, func(rp uint32) {
		impReadSince(ip, il, uint32(stream), d, cp, cl, maxBytes, rp)
	})
}

// ReadLogs drains both streams through the process's drain cursor.
func ReadLogs(id ID) (ReadLogsResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Call(v11, s, &wire.LReadLogsResult, wire.LiftReadLogsResult, func(rp uint32) { impReadLogs(ip, il, rp) })
}

// WriteStdin writes all of data (at most 1 MiB) or fails.
func WriteStdin(id ID, data []byte) (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	dp, dl := s.Bytes(data)
	return proccore.Call(v11, s, &lU32, proccore.LiftU32, func(rp uint32) { impWriteStdin(ip, il, dp, dl, rp) })
}

// CloseStdin closes stdin; idempotent.
func CloseStdin(id ID) error {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Unit(v11, s, func(rp uint32) { impCloseStdin(ip, il, rp) })
}

// SendSignal sends sig to the process group.
func SendSignal(id ID, sig Signal) error {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Unit(v11, s, func(rp uint32) { impSignal(ip, il, uint32(sig), rp) })
}

// Wait waits up to timeoutMS (capped by the host) for the exit.
func Wait(id ID, timeoutMS uint64) (ExitInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Call(v11, s, &wire.LExitInfo, wire.LiftExitInfo, func(rp uint32) { impWait(ip, il, timeoutMS, rp) })
}

// Stop sends SIGTERM, waits up to graceMS (nil: host default), then
// SIGKILL, and returns the exit.
func Stop(id ID, graceMS *uint64) (ExitInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	d, g := proccore.OptU64(graceMS)
	return proccore.Call(v11, s, &wire.LExitInfo, wire.LiftExitInfo, func(rp uint32) { impStop(ip, il, d, g, rp) })
}

// Release forgets an exited process.
func Release(id ID) error {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Unit(v11, s, func(rp uint32) { impRelease(ip, il, rp) })
}

// PollEvents returns events after cursor, blocking up to timeoutMS.
func PollEvents(cursor uint64, max uint32, timeoutMS uint64) (EventBatch, error) {
	s := &abi.Scope{}
	defer s.Free()
	return proccore.Call(v11, s, &wire.LEventBatch, wire.LiftEventBatch, func(rp uint32) {
		impPollEvents(cursor, max, timeoutMS, rp)
	})
}

// ---- handle methods ([method]process-handle.*) ----

// ReadLogs returns and consumes the output captured since the last drain.
func (h *Handle) ReadLogs() (ReadLogsResult, error) { return proccore.ReadLogs(v11, h.h, impHReadLogs) }

// WriteStdin writes all of data or fails.
func (h *Handle) WriteStdin(data []byte) (uint32, error) {
	return proccore.WriteStdin(v11, h.h, data, impHWriteStdin)
}

// CloseStdin is idempotent.
func (h *Handle) CloseStdin() error { return proccore.CloseStdin(v11, h.h, impHCloseStdin) }

// Signal sends sig to the process group.
func (h *Handle) Signal(sig Signal) error { return proccore.Signal(v11, h.h, sig, impHSignal) }

// Kill sends SIGKILL to the tree and returns the exit.
func (h *Handle) Kill() (ExitInfo, error) { return proccore.Kill(v11, h.h, impHKill) }

// Wait waits for the exit; nil waits up to the host's ceiling (on an
// attached handle nil is invalid-input).
func (h *Handle) Wait(timeoutMS *uint64) (ExitInfo, error) {
	return proccore.Wait(v11, h.h, timeoutMS, impHWait)
}

// WaitWithOutput waits, then drains both streams.
func (h *Handle) WaitWithOutput(timeoutMS *uint64) (ProcessResult, error) {
	return proccore.WaitWithOutput(v11, h.h, timeoutMS, impHWaitWithOutput)
}

// OSPid is the advisory host PID.
func (h *Handle) OSPid() (uint32, error) { return proccore.OSPid(v11, h.h, impHOSPid) }

// Drop releases the handle: an owning handle kills and reaps the process,
// an attached one detaches. Drop is idempotent; other methods after it
// trap in the host (handle 0 is never valid).
func (h *Handle) Drop() {
	if h.h != 0 {
		impHDrop(h.h)
		h.h = 0
	}
}

// Raw is the handle's table index, for tests that probe the host.
func (h *Handle) Raw() uint32 { return h.h }

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
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/wire"
)

// Types of the contract, mirrored from the WIT.
type (
	Code           = wire.Code
	Error          = wire.Error
	Signal         = wire.Signal
	EnvVar         = wire.EnvVar
	SpawnRequest   = wire.SpawnRequest
	ExitInfo       = wire.ExitInfo
	ProcessResult  = wire.ProcessResult
	ReadLogsResult = wire.ReadLogsResult
	ID             = wire.ID
	Overflow       = wire.Overflow
	ResourceLimits = wire.ResourceLimits
	PersistOptions = wire.PersistOptions
	Phase          = wire.Phase
	LogStream      = wire.LogStream
	ExitReason     = wire.ExitReason
	LogChunk       = wire.LogChunk
	ProcessInfo    = wire.ProcessInfo
	EventKind      = wire.EventKind
	ExitEvent      = wire.ExitEvent
	Event          = wire.Event
	EventBatch     = wire.EventBatch
)

// errors.Is sentinels, one per error-code case.
const (
	ErrCapabilityDenied   = wire.ErrCapabilityDenied
	ErrInvalidInput       = wire.ErrInvalidInput
	ErrBoundaryEscape     = wire.ErrBoundaryEscape
	ErrQuota              = wire.ErrQuota
	ErrTooLarge           = wire.ErrTooLarge
	ErrClosed             = wire.ErrClosed
	ErrCancelled          = wire.ErrCancelled
	ErrWaitTimeout        = wire.ErrWaitTimeout
	ErrUnavailable        = wire.ErrUnavailable
	ErrInternal           = wire.ErrInternal
	ErrNoSuchProcess      = wire.ErrNoSuchProcess
	ErrRegistryFull       = wire.ErrRegistryFull
	ErrPersistUnsupported = wire.ErrPersistUnsupported
	ErrTornWrite          = wire.ErrTornWrite
)

// Signals (process-signal of 1.1.0).
const (
	SigTerm = wire.SigTerm
	SigHup  = wire.SigHup
	SigInt  = wire.SigInt
	SigUsr1 = wire.SigUsr1
	SigUsr2 = wire.SigUsr2
	SigStop = wire.SigStop
	SigCont = wire.SigCont
	SigKill = wire.SigKill
)

// Enum values.
const (
	DropOldest        = wire.DropOldest
	Backpressure      = wire.Backpressure
	Stdout            = wire.Stdout
	Stderr            = wire.Stderr
	PhaseStarting     = wire.PhaseStarting
	PhaseRunning      = wire.PhaseRunning
	PhaseExited       = wire.PhaseExited
	EventExited       = wire.EventExited
	EventLogReady     = wire.EventLogReady
	EventStdinDrained = wire.EventStdinDrained
	ReasonSelfExit    = wire.ReasonSelfExit
	ReasonStopped     = wire.ReasonStopped
	ReasonKilled      = wire.ReasonKilled
	ReasonLifetime    = wire.ReasonLifetime
	ReasonIdle        = wire.ReasonIdle
	ReasonEvicted     = wire.ReasonEvicted
	ReasonRemoved     = wire.ReasonRemoved
)

// ParseSignal maps a WIT case name ("term", "kill", ...) to its Signal.
func ParseSignal(name string) (Signal, bool) { return wire.ParseSignal(name) }

// Ptr returns &v, for the optional fields of requests and options.
func Ptr[T any](v T) *T { return &v }

// ec is this version's error-code layout and case count.
var ec = wire.LErrorCode11

const cases = 14

// Result layouts of the functions, by ok payload.
var (
	lHandle = abi.Handle
	lU32    = abi.U32
	lID     = abi.String
	lList   = abi.List()
)

func result[T any](s *abi.Scope, ret []byte, ok *abi.Type, lift func(*abi.Lifter, []byte, uint32) T) (T, error) {
	return wire.LiftResult(s, ret, ok, ec, cases, lift)
}

// retArea allocates the return area of result<ok, error-code>.
func retArea(s *abi.Scope, ok *abi.Type) (uint32, []byte) {
	size, align, _ := wire.ResultShape(ok, ec)
	return s.Alloc(size, align)
}

func liftProcessResult(l *abi.Lifter, b []byte, off uint32) ProcessResult {
	return wire.LiftProcessResult(l, b, off)
}

func liftU32(_ *abi.Lifter, b []byte, off uint32) uint32 { return abi.GetU32(b, off) }

func liftString(l *abi.Lifter, b []byte, off uint32) string { return l.String(b, off, "string") }

// Spawn runs a process to completion and returns its output.
func Spawn(req SpawnRequest) (ProcessResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	f := wire.FlatSpawnRequest(s, &req)
	ok := &wire.LProcessResult
	rp, rb := retArea(s, ok)
	s.Enter()
	impSpawn(uint32(f[0]), uint32(f[1]), uint32(f[2]), uint32(f[3]), uint32(f[4]), uint32(f[5]), uint32(f[6]),
		uint32(f[7]), uint32(f[8]), uint32(f[9]), uint32(f[10]), uint32(f[11]), uint32(f[12]), f[13], rp)
	s.Leave()
	return result(s, rb, ok, liftProcessResult)
}

// Handle is an instance-scoped process handle: owning (SpawnBackground,
// dropping kills) or a view (Attach, dropping detaches). It is valid only
// within the tool call that made it: the instance is reset afterwards.
type Handle struct{ h uint32 }

// SpawnBackground starts a process owned by this instance.
func SpawnBackground(req SpawnRequest) (*Handle, error) {
	s := &abi.Scope{}
	defer s.Free()
	f := wire.FlatSpawnRequest(s, &req)
	rp, rb := retArea(s, &lHandle)
	s.Enter()
	impSpawnBackground(uint32(f[0]), uint32(f[1]), uint32(f[2]), uint32(f[3]), uint32(f[4]), uint32(f[5]), uint32(f[6]),
		uint32(f[7]), uint32(f[8]), uint32(f[9]), uint32(f[10]), uint32(f[11]), uint32(f[12]), f[13], rp)
	s.Leave()
	h, err := result(s, rb, &lHandle, liftU32)
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
	rp, rb := retArea(s, &lID)
	s.Enter()
	impSpawnPersistent(pp, rp)
	s.Leave()
	return result(s, rb, &lID, liftString)
}

// Attach returns a view handle on a persistent process.
func Attach(id ID) (*Handle, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	rp, rb := retArea(s, &lHandle)
	s.Enter()
	impAttach(ip, il, rp)
	s.Leave()
	h, err := result(s, rb, &lHandle, liftU32)
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
	var d, p, n uint32
	if labelFilter != nil {
		d = 1
		p, n = s.Str(*labelFilter)
	}
	rp, rb := retArea(s, &lList)
	s.Enter()
	impListProcesses(d, p, n, rp)
	s.Leave()
	return result(s, rb, &lList, wire.LiftProcessInfos)
}

// Status is a snapshot of one process.
func Status(id ID) (ProcessInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	ok := &wire.LProcessInfo
	rp, rb := retArea(s, ok)
	s.Enter()
	impStatus(ip, il, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftProcessInfo)
}

// StatusMany snapshots several processes; unknown IDs are absent.
func StatusMany(ids []ID) ([]ProcessInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Strs(ids)
	rp, rb := retArea(s, &lList)
	s.Enter()
	impStatusMany(ip, il, rp)
	s.Leave()
	return result(s, rb, &lList, wire.LiftProcessInfos)
}

// ReadSince reads one stream from cursor (nil: the start) without
// draining, at most maxBytes.
func ReadSince(id ID, stream LogStream, cursor *string, maxBytes uint32) (LogChunk, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	var d, cp, cl uint32
	if cursor != nil {
		d = 1
		cp, cl = s.Str(*cursor)
	}
	ok := &wire.LLogChunk
	rp, rb := retArea(s, ok)
	s.Enter()
	impReadSince(ip, il, uint32(stream), d, cp, cl, maxBytes, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftLogChunk)
}

// ReadLogs drains both streams through the process's drain cursor.
func ReadLogs(id ID) (ReadLogsResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	ok := &wire.LReadLogsResult
	rp, rb := retArea(s, ok)
	s.Enter()
	impReadLogs(ip, il, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftReadLogsResult)
}

// WriteStdin writes all of data (at most 1 MiB) or fails.
func WriteStdin(id ID, data []byte) (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	dp, dl := s.Bytes(data)
	rp, rb := retArea(s, &lU32)
	s.Enter()
	impWriteStdin(ip, il, dp, dl, rp)
	s.Leave()
	return result(s, rb, &lU32, liftU32)
}

// unit runs an import returning result<_, error-code>.
func unit(s *abi.Scope, call func(ret uint32)) error {
	rp, rb := retArea(s, nil)
	s.Enter()
	call(rp)
	s.Leave()
	_, err := result[struct{}](s, rb, nil, nil)
	return err
}

// CloseStdin closes stdin; idempotent.
func CloseStdin(id ID) error {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return unit(s, func(rp uint32) { impCloseStdin(ip, il, rp) })
}

// SendSignal sends sig to the process group.
func SendSignal(id ID, sig Signal) error {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return unit(s, func(rp uint32) { impSignal(ip, il, uint32(sig), rp) })
}

// Wait waits up to timeoutMS (capped by the host) for the exit.
func Wait(id ID, timeoutMS uint64) (ExitInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	ok := &wire.LExitInfo
	rp, rb := retArea(s, ok)
	s.Enter()
	impWait(ip, il, timeoutMS, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftExitInfo)
}

// Stop sends SIGTERM, waits up to graceMS (nil: host default), then
// SIGKILL, and returns the exit.
func Stop(id ID, graceMS *uint64) (ExitInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	var d uint32
	var g uint64
	if graceMS != nil {
		d, g = 1, *graceMS
	}
	ok := &wire.LExitInfo
	rp, rb := retArea(s, ok)
	s.Enter()
	impStop(ip, il, d, g, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftExitInfo)
}

// Release forgets an exited process.
func Release(id ID) error {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return unit(s, func(rp uint32) { impRelease(ip, il, rp) })
}

// PollEvents returns events after cursor, blocking up to timeoutMS.
func PollEvents(cursor uint64, max uint32, timeoutMS uint64) (EventBatch, error) {
	s := &abi.Scope{}
	defer s.Free()
	ok := &wire.LEventBatch
	rp, rb := retArea(s, ok)
	s.Enter()
	impPollEvents(cursor, max, timeoutMS, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftEventBatch)
}

// ---- handle methods ([method]process-handle.*) ----

// ReadLogs returns and consumes the output captured since the last drain.
func (h *Handle) ReadLogs() (ReadLogsResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	ok := &wire.LReadLogsResult
	rp, rb := retArea(s, ok)
	s.Enter()
	impHReadLogs(h.h, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftReadLogsResult)
}

// WriteStdin writes all of data or fails.
func (h *Handle) WriteStdin(data []byte) (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	dp, dl := s.Bytes(data)
	rp, rb := retArea(s, &lU32)
	s.Enter()
	impHWriteStdin(h.h, dp, dl, rp)
	s.Leave()
	return result(s, rb, &lU32, liftU32)
}

// CloseStdin is idempotent.
func (h *Handle) CloseStdin() error {
	s := &abi.Scope{}
	defer s.Free()
	return unit(s, func(rp uint32) { impHCloseStdin(h.h, rp) })
}

// Signal sends sig to the process group.
func (h *Handle) Signal(sig Signal) error {
	s := &abi.Scope{}
	defer s.Free()
	return unit(s, func(rp uint32) { impHSignal(h.h, uint32(sig), rp) })
}

// Kill sends SIGKILL to the tree and returns the exit.
func (h *Handle) Kill() (ExitInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	ok := &wire.LExitInfo
	rp, rb := retArea(s, ok)
	s.Enter()
	impHKill(h.h, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftExitInfo)
}

func optU64(v *uint64) (uint32, uint64) {
	if v == nil {
		return 0, 0
	}
	return 1, *v
}

// Wait waits for the exit; nil waits up to the host's ceiling (on an
// attached handle nil is invalid-input).
func (h *Handle) Wait(timeoutMS *uint64) (ExitInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	d, t := optU64(timeoutMS)
	ok := &wire.LExitInfo
	rp, rb := retArea(s, ok)
	s.Enter()
	impHWait(h.h, d, t, rp)
	s.Leave()
	return result(s, rb, ok, wire.LiftExitInfo)
}

// WaitWithOutput waits, then drains both streams.
func (h *Handle) WaitWithOutput(timeoutMS *uint64) (ProcessResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	d, t := optU64(timeoutMS)
	ok := &wire.LProcessResult
	rp, rb := retArea(s, ok)
	s.Enter()
	impHWaitWithOutput(h.h, d, t, rp)
	s.Leave()
	return result(s, rb, ok, liftProcessResult)
}

// OSPid is the advisory host PID.
func (h *Handle) OSPid() (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	rp, rb := retArea(s, &lU32)
	s.Enter()
	impHOSPid(h.h, rp)
	s.Leave()
	return result(s, rb, &lU32, liftU32)
}

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

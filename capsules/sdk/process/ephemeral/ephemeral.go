// Package ephemeral is the typed Go API over capsule:process/host@1.0.0,
// the ephemeral tier only. A capsule built with it imports nothing of
// 1.1.0, so it loads on any host that serves 1.0.0 (world
// capsule-ephemeral).
//
// The Go types are the ones of package process; 1.0.0 has fewer
// error-code cases (no no-such-process, registry-full, persist-unsupported,
// torn-write) and fewer signals (term, hup, int, usr1, usr2).
package ephemeral

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
)

// errors.Is sentinels, one per 1.0.0 error-code case.
const (
	ErrCapabilityDenied = wire.ErrCapabilityDenied
	ErrInvalidInput     = wire.ErrInvalidInput
	ErrBoundaryEscape   = wire.ErrBoundaryEscape
	ErrQuota            = wire.ErrQuota
	ErrTooLarge         = wire.ErrTooLarge
	ErrClosed           = wire.ErrClosed
	ErrCancelled        = wire.ErrCancelled
	ErrWaitTimeout      = wire.ErrWaitTimeout
	ErrUnavailable      = wire.ErrUnavailable
	ErrInternal         = wire.ErrInternal
)

// Signals (process-signal of 1.0.0).
const (
	SigTerm = wire.SigTerm
	SigHup  = wire.SigHup
	SigInt  = wire.SigInt
	SigUsr1 = wire.SigUsr1
	SigUsr2 = wire.SigUsr2
)

// ec is this version's error-code layout and case count.
var ec = wire.LErrorCode10

const cases = 10

var (
	lHandle = abi.Handle
	lU32    = abi.U32
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

// Handle is a process owned by this instance: dropping it (or the
// instance's reset at the end of the tool call) kills and reaps it.
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

// unit runs an import returning result<_, error-code>.
func unit(s *abi.Scope, call func(ret uint32)) error {
	rp, rb := retArea(s, nil)
	s.Enter()
	call(rp)
	s.Leave()
	_, err := result[struct{}](s, rb, nil, nil)
	return err
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

// Wait waits for the exit; nil waits up to the host's ceiling.
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

// Drop kills and reaps the process. Drop is idempotent; other methods after it
// trap in the host (handle 0 is never valid).
func (h *Handle) Drop() {
	if h.h != 0 {
		impHDrop(h.h)
		h.h = 0
	}
}

// Raw is the handle's table index, for tests that probe the host.
func (h *Handle) Raw() uint32 { return h.h }

// Ptr returns &v, for the optional fields of requests.
func Ptr[T any](v T) *T { return &v }

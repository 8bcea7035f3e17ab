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
	"github.com/capsule-host/capsule-host/capsules/sdk/api"
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
)

// errors.Is sentinels, one per 1.0.0 error-code case.
const (
	ErrCapabilityDenied = api.ErrCapabilityDenied
	ErrInvalidInput     = api.ErrInvalidInput
	ErrBoundaryEscape   = api.ErrBoundaryEscape
	ErrQuota            = api.ErrQuota
	ErrTooLarge         = api.ErrTooLarge
	ErrClosed           = api.ErrClosed
	ErrCancelled        = api.ErrCancelled
	ErrWaitTimeout      = api.ErrWaitTimeout
	ErrUnavailable      = api.ErrUnavailable
	ErrInternal         = api.ErrInternal
)

// Signals (process-signal of 1.0.0).
const (
	SigTerm = api.SigTerm
	SigHup  = api.SigHup
	SigInt  = api.SigInt
	SigUsr1 = api.SigUsr1
	SigUsr2 = api.SigUsr2
)

// v10 is this version's error-code.
var v10 = &proccore.Version{EC: wire.LErrorCode10, Cases: 10}

// Spawn runs a process to completion and returns its output.
func Spawn(req SpawnRequest) (ProcessResult, error) { return proccore.Spawn(v10, &req, impSpawn) }

// Handle is a process owned by this instance: dropping it (or the
// instance's reset at the end of the tool call) kills and reaps it.
type Handle struct{ h uint32 }

// SpawnBackground starts a process owned by this instance.
func SpawnBackground(req SpawnRequest) (*Handle, error) {
	h, err := proccore.SpawnBackground(v10, &req, impSpawnBackground)
	if err != nil {
		return nil, err
	}
	return &Handle{h: h}, nil
}

// ---- handle methods ([method]process-handle.*) ----

// ReadLogs returns and consumes the output captured since the last drain.
func (h *Handle) ReadLogs() (ReadLogsResult, error) { return proccore.ReadLogs(v10, h.h, impHReadLogs) }

// WriteStdin writes all of data or fails.
func (h *Handle) WriteStdin(data []byte) (uint32, error) {
	return proccore.WriteStdin(v10, h.h, data, impHWriteStdin)
}

// CloseStdin is idempotent.
func (h *Handle) CloseStdin() error { return proccore.CloseStdin(v10, h.h, impHCloseStdin) }

// Signal sends sig to the process group.
func (h *Handle) Signal(sig Signal) error { return proccore.Signal(v10, h.h, sig, impHSignal) }

// Kill sends SIGKILL to the tree and returns the exit.
func (h *Handle) Kill() (ExitInfo, error) { return proccore.Kill(v10, h.h, impHKill) }

// Wait waits for the exit; nil waits up to the host's ceiling.
func (h *Handle) Wait(timeoutMS *uint64) (ExitInfo, error) {
	return proccore.Wait(v10, h.h, timeoutMS, impHWait)
}

// WaitWithOutput waits, then drains both streams.
func (h *Handle) WaitWithOutput(timeoutMS *uint64) (ProcessResult, error) {
	return proccore.WaitWithOutput(v10, h.h, timeoutMS, impHWaitWithOutput)
}

// OSPid is the advisory host PID.
func (h *Handle) OSPid() (uint32, error) { return proccore.OSPid(v10, h.h, impHOSPid) }

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

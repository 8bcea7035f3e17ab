// Package proccore is what capsule:process 1.0.0 and 1.1.0 share: spawn,
// spawn-background and the process-handle methods have the same core
// signatures in both versions and differ only in their import module and
// error-code. Packages process and ephemeral each declare their own
// //go:wasmimport functions and pass them in per call.
//
// Why per call and not a table of imports: the linker keeps only the
// //go:wasmimport functions a capsule reaches, so a capsule's module
// imports exactly what it calls. A struct holding every import would
// reach them all.
package proccore

import (
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/wire"
)

// Version is one contract version's error-code: its layout and number of
// cases (a case beyond them is a host bug, lifted as internal).
type Version struct {
	EC    abi.Type
	Cases int
}

// Call allocates the return area of result<ok, error-code> in s, runs imp
// with its address while the host may use s, and lifts the result.
// ok nil is result<_, error-code>.
func Call[T any](v *Version, s *abi.Scope, ok *abi.Type, lift func(*abi.Lifter, []byte, uint32) T, imp func(ret uint32)) (T, error) {
	size, align, _ := wire.ResultShape(ok, v.EC)
	rp, rb := s.Alloc(size, align)
	s.Enter()
	imp(rp)
	s.Leave()
	return wire.LiftResult(s, rb, ok, v.EC, v.Cases, lift)
}

// Unit is Call for result<_, error-code>.
func Unit(v *Version, s *abi.Scope, imp func(ret uint32)) error {
	_, err := Call[struct{}](v, s, nil, nil, imp)
	return err
}

// LiftU32 lifts a u32 (also an own or borrow handle).
func LiftU32(_ *abi.Lifter, b []byte, off uint32) uint32 { return abi.GetU32(b, off) }

func liftProcessResult(l *abi.Lifter, b []byte, off uint32) wire.ProcessResult {
	return wire.LiftProcessResult(l, b, off)
}

// SpawnFunc is the core signature of spawn and spawn-background: a
// spawn-request flattens to 14 values, then the return pointer.
type SpawnFunc = func(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32)

func spawnCall(s *abi.Scope, req *wire.SpawnRequest, imp SpawnFunc) func(ret uint32) {
	f := wire.FlatSpawnRequest(s, req)
	return func(rp uint32) {
		imp(uint32(f[0]), uint32(f[1]), uint32(f[2]), uint32(f[3]), uint32(f[4]), uint32(f[5]), uint32(f[6]),
			uint32(f[7]), uint32(f[8]), uint32(f[9]), uint32(f[10]), uint32(f[11]), uint32(f[12]), f[13], rp)
	}
}

// Spawn runs spawn.
func Spawn(v *Version, req *wire.SpawnRequest, imp SpawnFunc) (wire.ProcessResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	return Call(v, s, &wire.LProcessResult, liftProcessResult, spawnCall(s, req, imp))
}

// SpawnBackground runs spawn-background and returns the handle's index.
func SpawnBackground(v *Version, req *wire.SpawnRequest, imp SpawnFunc) (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	return Call(v, s, &abi.Handle, LiftU32, spawnCall(s, req, imp))
}

// The [method]process-handle.* calls; h is the handle's index.

// ReadLogs runs read-logs.
func ReadLogs(v *Version, h uint32, imp func(self, ret uint32)) (wire.ReadLogsResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	return Call(v, s, &wire.LReadLogsResult, wire.LiftReadLogsResult, func(rp uint32) { imp(h, rp) })
}

// WriteStdin runs write-stdin.
func WriteStdin(v *Version, h uint32, data []byte, imp func(self, dataP, dataL, ret uint32)) (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	dp, dl := s.Bytes(data)
	return Call(v, s, &abi.U32, LiftU32, func(rp uint32) { imp(h, dp, dl, rp) })
}

// CloseStdin runs close-stdin.
func CloseStdin(v *Version, h uint32, imp func(self, ret uint32)) error {
	s := &abi.Scope{}
	defer s.Free()
	return Unit(v, s, func(rp uint32) { imp(h, rp) })
}

// Signal runs signal.
func Signal(v *Version, h uint32, sig wire.Signal, imp func(self, sig, ret uint32)) error {
	s := &abi.Scope{}
	defer s.Free()
	return Unit(v, s, func(rp uint32) { imp(h, uint32(sig), rp) })
}

// Kill runs kill.
func Kill(v *Version, h uint32, imp func(self, ret uint32)) (wire.ExitInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	return Call(v, s, &wire.LExitInfo, wire.LiftExitInfo, func(rp uint32) { imp(h, rp) })
}

// WaitFunc is the core signature of wait and wait-with-output
// (option<u64> flattens to a discriminant and a value).
type WaitFunc = func(self, timeoutD uint32, timeoutMS uint64, ret uint32)

// OptU64 flattens option<u64>.
func OptU64(v *uint64) (uint32, uint64) {
	if v == nil {
		return 0, 0
	}
	return 1, *v
}

// Wait runs wait.
func Wait(v *Version, h uint32, timeoutMS *uint64, imp WaitFunc) (wire.ExitInfo, error) {
	s := &abi.Scope{}
	defer s.Free()
	d, t := OptU64(timeoutMS)
	return Call(v, s, &wire.LExitInfo, wire.LiftExitInfo, func(rp uint32) { imp(h, d, t, rp) })
}

// WaitWithOutput runs wait-with-output.
func WaitWithOutput(v *Version, h uint32, timeoutMS *uint64, imp WaitFunc) (wire.ProcessResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	d, t := OptU64(timeoutMS)
	return Call(v, s, &wire.LProcessResult, liftProcessResult, func(rp uint32) { imp(h, d, t, rp) })
}

// OSPid runs os-pid.
func OSPid(v *Version, h uint32, imp func(self, ret uint32)) (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	return Call(v, s, &abi.U32, LiftU32, func(rp uint32) { imp(h, rp) })
}

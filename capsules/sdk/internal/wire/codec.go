package wire

import (
	"fmt"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
)

// ---- lowering ----

// envList lowers list<env-var>.
func envList(s *abi.Scope, env []EnvVar) (uint32, uint32) {
	p, m := s.Alloc(uint32(len(env))*LEnvVar.Size, LEnvVar.Align)
	for i, e := range env {
		off := uint32(i) * LEnvVar.Size
		s.PutStr(m, off+LEnvVar.Offs[0], e.Key)
		s.PutStr(m, off+LEnvVar.Offs[1], e.Value)
	}
	return p, uint32(len(env))
}

// FlatSpawnRequest lowers a spawn-request to its 14 flat values (i32
// slots as uint32 in a uint64, the i64 timeout as is), unused payload
// slots zero (lower_flat_variant).
func FlatSpawnRequest(s *abi.Scope, r *SpawnRequest) [14]uint64 {
	var f [14]uint64
	p, n := s.Str(r.Cmd)
	f[0], f[1] = uint64(p), uint64(n)
	p, n = s.Strs(r.Args)
	f[2], f[3] = uint64(p), uint64(n)
	if r.Stdin != nil {
		p, n = s.Bytes(r.Stdin)
		f[4], f[5], f[6] = 1, uint64(p), uint64(n)
	}
	p, n = envList(s, r.Env)
	f[7], f[8] = uint64(p), uint64(n)
	if r.Cwd != nil {
		p, n = s.Str(*r.Cwd)
		f[9], f[10], f[11] = 1, uint64(p), uint64(n)
	}
	if r.TimeoutMS != nil {
		f[12], f[13] = 1, *r.TimeoutMS
	}
	return f
}

func putOptU64(b []byte, off uint32, t abi.Type, v *uint64) {
	if v != nil {
		abi.PutU8(b, off, 1)
		abi.PutU64(b, off+t.Payload, *v)
	}
}

func putOptU32(b []byte, off uint32, t abi.Type, v *uint32) {
	if v != nil {
		abi.PutU8(b, off, 1)
		abi.PutU32(b, off+t.Payload, *v)
	}
}

var (
	optU64    = abi.Option(abi.U64)
	optU32    = abi.Option(abi.U32)
	optS32    = abi.Option(abi.S32)
	optString = abi.Option(abi.String)
	optList   = abi.Option(abi.List())
)

// StoreSpawnRequest stores r at b[off:] (store for a record). b must be
// zeroed: absent options keep discriminant 0.
func StoreSpawnRequest(s *abi.Scope, b []byte, off uint32, r *SpawnRequest) {
	o := LSpawnRequest.Offs
	s.PutStr(b, off+o[0], r.Cmd)
	p, n := s.Strs(r.Args)
	abi.PutU32(b, off+o[1], p)
	abi.PutU32(b, off+o[1]+4, n)
	if r.Stdin != nil {
		abi.PutU8(b, off+o[2], 1)
		s.PutBytes(b, off+o[2]+optList.Payload, r.Stdin)
	}
	p, n = envList(s, r.Env)
	abi.PutU32(b, off+o[3], p)
	abi.PutU32(b, off+o[3]+4, n)
	if r.Cwd != nil {
		abi.PutU8(b, off+o[4], 1)
		s.PutStr(b, off+o[4]+optString.Payload, *r.Cwd)
	}
	putOptU64(b, off+o[5], optU64, r.TimeoutMS)
}

// StorePersistOptions stores o at b[off:] (zeroed).
func StorePersistOptions(s *abi.Scope, b []byte, off uint32, po *PersistOptions) {
	o := LPersistOptions.Offs
	if po.Label != nil {
		abi.PutU8(b, off+o[0], 1)
		s.PutStr(b, off+o[0]+optString.Payload, *po.Label)
	}
	abi.PutBool(b, off+o[1], po.KeepStdinOpen)
	abi.PutU8(b, off+o[2], uint8(po.Overflow))
	putOptU32(b, off+o[3], optU32, po.LogRingBytes)
	putOptU64(b, off+o[4], optU64, po.MaxLifetimeMS)
	putOptU64(b, off+o[5], optU64, po.IdleTimeoutMS)
	putOptU64(b, off+o[6], optU64, po.ExitRetentionMS)
	lo := off + o[7]
	l := LResourceLimits.Offs
	putOptU64(b, lo+l[0], optU64, po.Limits.MaxMemoryBytes)
	putOptU64(b, lo+l[1], optU64, po.Limits.MaxCPUMS)
	putOptU32(b, lo+l[2], optU32, po.Limits.MaxPids)
	putOptU32(b, lo+l[3], optU32, po.Limits.MaxOpenFiles)
}

// ---- lifting ----

// optS32At lifts option<s32>.
func optS32At(l *abi.Lifter, b []byte, off uint32, what string) *int32 {
	if l.Case(b, off, 2, what) == 0 { // also 0 after an earlier problem
		return nil
	}
	return abi.Box(l, abi.GetS32(b, off+optS32.Payload))
}

func optU32At(l *abi.Lifter, b []byte, off uint32, what string) *uint32 {
	if l.Case(b, off, 2, what) == 0 { // also 0 after an earlier problem
		return nil
	}
	return abi.Box(l, abi.GetU32(b, off+optU32.Payload))
}

func optU64At(l *abi.Lifter, b []byte, off uint32, what string) *uint64 {
	if l.Case(b, off, 2, what) == 0 { // also 0 after an earlier problem
		return nil
	}
	return abi.Box(l, abi.GetU64(b, off+optU64.Payload))
}

// LiftExitInfo lifts exit-info at b[off:].
func LiftExitInfo(l *abi.Lifter, b []byte, off uint32) ExitInfo {
	o := LExitInfo.Offs
	return ExitInfo{
		ExitCode: optS32At(l, b, off+o[0], "exit-info.exit-code"),
		Signal:   optS32At(l, b, off+o[1], "exit-info.signal"),
	}
}

var optExitInfo = abi.Option(LExitInfo)

func optExitInfoAt(l *abi.Lifter, b []byte, off uint32, what string) *ExitInfo {
	if l.Case(b, off, 2, what) == 0 || l.Err != nil {
		return nil
	}
	e := LiftExitInfo(l, b, off+optExitInfo.Payload)
	return &e
}

// LiftProcessResult lifts process-result at b[off:].
func LiftProcessResult(l *abi.Lifter, b []byte, off uint32) ProcessResult {
	o := LProcessResult.Offs
	return ProcessResult{
		Stdout:    l.Bytes(b, off+o[0], "process-result.stdout"),
		Stderr:    l.Bytes(b, off+o[1], "process-result.stderr"),
		Exit:      LiftExitInfo(l, b, off+o[2]),
		Truncated: abi.GetBool(b, off+o[3]),
	}
}

// LiftReadLogsResult lifts read-logs-result at b[off:].
func LiftReadLogsResult(l *abi.Lifter, b []byte, off uint32) ReadLogsResult {
	o := LReadLogsResult.Offs
	return ReadLogsResult{
		Stdout:       l.Bytes(b, off+o[0], "read-logs-result.stdout"),
		Stderr:       l.Bytes(b, off+o[1], "read-logs-result.stderr"),
		Running:      abi.GetBool(b, off+o[2]),
		Exit:         optExitInfoAt(l, b, off+o[3], "read-logs-result.exit"),
		BytesDropped: abi.GetU64(b, off+o[4]),
	}
}

// LiftErrorCode lifts an error-code of the given layout (10 or 14 cases).
func LiftErrorCode(l *abi.Lifter, b []byte, off uint32, ec abi.Type, cases int) *Error {
	d := Code(l.Case(b, off, cases, "error-code"))
	if l.Err != nil {
		return nil
	}
	e := &Error{Code: d}
	switch d {
	case ErrCapabilityDenied, ErrInvalidInput, ErrBoundaryEscape, ErrTooLarge, ErrUnavailable, ErrInternal:
		e.Message = l.String(b, off+ec.Payload, "error-code."+d.String())
	case ErrTornWrite:
		e.Written = abi.GetU64(b, off+ec.Payload)
	}
	return e
}

// LiftLogChunk lifts log-chunk at b[off:].
func LiftLogChunk(l *abi.Lifter, b []byte, off uint32) LogChunk {
	o := LLogChunk.Offs
	return LogChunk{
		Data:         l.Bytes(b, off+o[0], "log-chunk.data"),
		Next:         l.String(b, off+o[1], "log-chunk.next"),
		BytesDropped: abi.GetU64(b, off+o[2]),
		EOF:          abi.GetBool(b, off+o[3]),
	}
}

var optEnum7 = abi.Option(abi.Enum(7))

// LiftProcessInfo lifts process-info at b[off:]. Its discriminants are
// read together, and only a bad one (or an earlier problem) takes the
// checked reads, which name it: a list lifts this once per process, and
// in the guest every call and branch costs the engine's termination
// check.
func LiftProcessInfo(l *abi.Lifter, b []byte, off uint32) ProcessInfo {
	o := LProcessInfo.Offs
	pi := ProcessInfo{
		ID:            l.String(b, off+o[0], "process-info.id"),
		Label:         l.String(b, off+o[1], "process-info.label"),
		Command:       l.String(b, off+o[2], "process-info.command"),
		AgeMS:         abi.GetU64(b, off+o[7]),
		IdleMS:        abi.GetU64(b, off+o[8]),
		BufferedBytes: abi.GetU64(b, off+o[9]),
		BytesDropped:  abi.GetU64(b, off+o[10]),
		StdinOpen:     abi.GetBool(b, off+o[11]),
	}
	pid, phase, exit, cpu, mem, reason := b[off+o[3]], b[off+o[4]], b[off+o[5]], b[off+o[12]], b[off+o[13]], b[off+o[6]]
	if pid|exit|cpu|mem|reason > 1 || phase > 2 || reason == 1 && b[off+o[6]+optEnum7.Payload] > 6 || l.Err != nil {
		pid = byte(l.Case(b, off+o[3], 2, "process-info.os-pid"))
		phase = byte(l.Case(b, off+o[4], 3, "process-info.phase"))
		exit = byte(l.Case(b, off+o[5], 2, "process-info.exit"))
		cpu = byte(l.Case(b, off+o[12], 2, "process-info.cpu-ms"))
		mem = byte(l.Case(b, off+o[13], 2, "process-info.mem-bytes-peak"))
		if reason = byte(l.Case(b, off+o[6], 2, "process-info.exit-reason")); reason == 1 {
			l.Case(b, off+o[6]+optEnum7.Payload, 7, "exit-reason")
		}
		if l.Err != nil {
			return pi
		}
	}
	pi.Phase = Phase(phase)
	if pid == 1 {
		pi.OSPid = abi.Box(l, abi.GetU32(b, off+o[3]+optU32.Payload))
	}
	if exit == 1 {
		e := LiftExitInfo(l, b, off+o[5]+optExitInfo.Payload)
		pi.Exit = &e
	}
	if cpu == 1 {
		pi.CPUMS = abi.Box(l, abi.GetU64(b, off+o[12]+optU64.Payload))
	}
	if mem == 1 {
		pi.MemBytesPeak = abi.Box(l, abi.GetU64(b, off+o[13]+optU64.Payload))
	}
	if reason == 1 {
		pi.ExitReason = abi.Box(l, ExitReason(b[off+o[6]+optEnum7.Payload]))
	}
	return pi
}

// LiftProcessInfos lifts list<process-info> whose (ptr, len) is at b[off:].
func LiftProcessInfos(l *abi.Lifter, b []byte, off uint32) []ProcessInfo {
	return abi.LiftList(l, b, off, LProcessInfo, "list<process-info>", LiftProcessInfo)
}

// LiftEventBatch lifts event-batch at b[off:].
func LiftEventBatch(l *abi.Lifter, b []byte, off uint32) EventBatch {
	o := LEventBatch.Offs
	elems := l.List(b, off+o[0], LProcessEvent, "event-batch.events")
	eb := EventBatch{
		Events: make([]Event, 0, len(elems)),
		Next:   abi.GetU64(b, off+o[1]),
		Missed: abi.GetU64(b, off+o[2]),
	}
	po := LProcessEvent.Offs
	for _, e := range elems {
		ev := Event{
			Seq: abi.GetU64(e, po[0]),
			ID:  l.String(e, po[1], "process-event.id"),
		}
		ko := po[2]
		ev.Kind = EventKind(l.Case(e, ko, 3, "event-kind"))
		pay := ko + LEventKind.Payload
		switch ev.Kind {
		case EventExited:
			ee := ExitEvent{
				Exit:   LiftExitInfo(l, e, pay+LExitEvent.Offs[0]),
				Reason: ExitReason(l.Case(e, pay+LExitEvent.Offs[1], 7, "exit-event.reason")),
			}
			ev.Exit = &ee
		case EventLogReady:
			ev.Stream = LogStream(l.Case(e, pay, 2, "log-stream"))
		}
		eb.Events = append(eb.Events, ev)
	}
	return eb
}

// LiftResult lifts result<T, error-code> from a return area: ok lifts
// the payload. An ABI violation becomes ErrInternal naming the problem.
func LiftResult[T any](s *abi.Scope, ret []byte, ok *abi.Type, ec abi.Type, cases int, lift func(*abi.Lifter, []byte, uint32) T) (T, error) {
	var zero T
	_, _, payload := ResultShape(ok, ec)
	l := abi.Lifter{M: s}
	switch l.Case(ret, 0, 2, "result") {
	case 0:
		if lift == nil {
			return zero, nil
		}
		v := lift(&l, ret, payload)
		if l.Err != nil {
			return zero, abiError(l.Err)
		}
		return v, nil
	default:
		e := LiftErrorCode(&l, ret, payload, ec, cases)
		if l.Err != nil {
			return zero, abiError(l.Err)
		}
		return zero, e
	}
}

// abiError reports a host that broke the Canonical ABI.
func abiError(err error) error {
	return &Error{Code: ErrInternal, Message: fmt.Sprintf("guest bindings could not lift the host's result: %v", err)}
}

package proc

import (
	"encoding/binary"
	"unsafe"

	"go.bytecodealliance.org/cm"
)

// Layout is what differs between the versions' memory layouts: 1.1.0's
// error-code has a u64 case (torn-write), so it is 8-aligned and its
// payload sits at offset 8; 1.0.0's is 4-aligned with its payload at 4.
type Layout struct {
	ErrAlign, ErrSize, ErrPayload uint32
}

var (
	Layout10 = Layout{ErrAlign: 4, ErrSize: 12, ErrPayload: 4}
	Layout11 = Layout{ErrAlign: 8, ErrSize: 16, ErrPayload: 8}
)

// Sizes, alignments and field offsets of the records, derived by hand from
// the Canonical ABI (TestGuestLayouts compares each with
// go.bytecodealliance.org/wit). Keys are "type" (size), "type/align" and
// "type.field" (offset).
var Offsets = map[string]uint32{
	"exit-info": 16, "exit-info/align": 4,
	"exit-info.exit-code": 0, "exit-info.signal": 8,

	"process-result": 36, "process-result/align": 4,
	"process-result.stdout": 0, "process-result.stderr": 8, "process-result.exit": 16, "process-result.truncated": 32,

	"read-logs-result": 48, "read-logs-result/align": 8,
	"read-logs-result.stdout": 0, "read-logs-result.stderr": 8, "read-logs-result.running": 16,
	"read-logs-result.exit": 20, "read-logs-result.bytes-dropped": 40,

	"env-var": 16, "env-var/align": 4, "env-var.key": 0, "env-var.value": 8,

	"spawn-request": 64, "spawn-request/align": 8,
	"spawn-request.cmd": 0, "spawn-request.args": 8, "spawn-request.stdin": 16, "spawn-request.env": 28,
	"spawn-request.cwd": 36, "spawn-request.timeout-ms": 48,

	"resource-limits": 48, "resource-limits/align": 8,
	"resource-limits.max-memory-bytes": 0, "resource-limits.max-cpu-ms": 16,
	"resource-limits.max-pids": 32, "resource-limits.max-open-files": 40,

	"persist-options": 120, "persist-options/align": 8,
	"persist-options.label": 0, "persist-options.keep-stdin-open": 12, "persist-options.overflow": 13,
	"persist-options.log-ring-bytes": 16, "persist-options.max-lifetime-ms": 24,
	"persist-options.idle-timeout-ms": 40, "persist-options.exit-retention-ms": 56, "persist-options.limits": 72,

	"log-chunk": 32, "log-chunk/align": 8,
	"log-chunk.data": 0, "log-chunk.next": 8, "log-chunk.bytes-dropped": 16, "log-chunk.eof": 24,

	"process-info": 136, "process-info/align": 8,
	"process-info.id": 0, "process-info.label": 8, "process-info.command": 16, "process-info.os-pid": 24,
	"process-info.phase": 32, "process-info.exit": 36, "process-info.exit-reason": 56, "process-info.age-ms": 64,
	"process-info.idle-ms": 72, "process-info.buffered-bytes": 80, "process-info.bytes-dropped": 88,
	"process-info.stdin-open": 96, "process-info.cpu-ms": 104, "process-info.mem-bytes-peak": 120,

	"exit-event": 20, "exit-event/align": 4, "exit-event.exit": 0, "exit-event.reason": 16,

	"process-event": 40, "process-event/align": 8,
	"process-event.seq": 0, "process-event.id": 8, "process-event.kind": 16,

	"event-batch": 24, "event-batch/align": 8,
	"event-batch.events": 0, "event-batch.next": 8, "event-batch.missed": 16,
}

// Options and variants used below: option<T> is a u8 discriminant, then T
// at T's alignment; event-kind's payload (exit-event, align 4) sits at 4.
const (
	optU32Val    = 4  // option<u32>, option<s32>, option<string>, option<list>
	optU64Val    = 8  // option<u64>
	eventKindVal = 4  // event-kind payload
	optExitVal   = 4  // option<exit-info>
	areaWords    = 40 // return area: 320 bytes, enough for every result
)

// o returns a layout entry, panicking on a typo (a guest bug, not input).
func o(k string) uint32 {
	v, ok := Offsets[k]
	if !ok {
		panic("proc: no layout entry " + k)
	}
	return v
}

// Linear memory access. A Go pointer on GOARCH=wasm is an address in the
// module's linear memory, so addresses the host wrote are read in place.

func mem(a, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(a))), n)
}

func u8(a uint32) uint8   { return mem(a, 1)[0] }
func u32(a uint32) uint32 { return binary.LittleEndian.Uint32(mem(a, 4)) }
func u64(a uint32) uint64 { return binary.LittleEndian.Uint64(mem(a, 8)) }

func addr(p unsafe.Pointer) uint32 { return uint32(uintptr(p)) }

// liftString copies the string whose (ptr, len) pair is at a.
func liftString(a uint32) string { return string(mem(u32(a), u32(a+4))) }

// liftBytes copies the list<u8> whose (ptr, len) pair is at a.
func liftBytes(a uint32) cm.List[uint8] {
	b := mem(u32(a), u32(a+4))
	return cm.ToList(append([]byte{}, b...))
}

func liftOptS32(a uint32) cm.Option[int32] {
	if u8(a) == 0 {
		return cm.None[int32]()
	}
	return cm.Some(int32(u32(a + optU32Val)))
}

func liftOptU32(a uint32) cm.Option[uint32] {
	if u8(a) == 0 {
		return cm.None[uint32]()
	}
	return cm.Some(u32(a + optU32Val))
}

func liftOptU64(a uint32) cm.Option[uint64] {
	if u8(a) == 0 {
		return cm.None[uint64]()
	}
	return cm.Some(u64(a + optU64Val))
}

func liftExit(a uint32) ExitInfo {
	return ExitInfo{ExitCode: liftOptS32(a + o("exit-info.exit-code")), Signal: liftOptS32(a + o("exit-info.signal"))}
}

func liftOptExit(a uint32) cm.Option[ExitInfo] {
	if u8(a) == 0 {
		return cm.None[ExitInfo]()
	}
	return cm.Some(liftExit(a + optExitVal))
}

func liftProcessResult(a uint32) ProcessResult {
	return ProcessResult{
		Stdout:    liftBytes(a + o("process-result.stdout")),
		Stderr:    liftBytes(a + o("process-result.stderr")),
		Exit:      liftExit(a + o("process-result.exit")),
		Truncated: u8(a+o("process-result.truncated")) != 0,
	}
}

func liftReadLogs(a uint32) ReadLogsResult {
	return ReadLogsResult{
		Stdout:       liftBytes(a + o("read-logs-result.stdout")),
		Stderr:       liftBytes(a + o("read-logs-result.stderr")),
		Running:      u8(a+o("read-logs-result.running")) != 0,
		Exit:         liftOptExit(a + o("read-logs-result.exit")),
		BytesDropped: u64(a + o("read-logs-result.bytes-dropped")),
	}
}

func liftProcessInfo(a uint32) ProcessInfo {
	i := ProcessInfo{
		ID:            ProcessID(liftString(a + o("process-info.id"))),
		Label:         liftString(a + o("process-info.label")),
		Command:       liftString(a + o("process-info.command")),
		OsPid:         liftOptU32(a + o("process-info.os-pid")),
		Phase:         ProcessPhase(u8(a + o("process-info.phase"))),
		Exit:          liftOptExit(a + o("process-info.exit")),
		AgeMs:         u64(a + o("process-info.age-ms")),
		IdleMs:        u64(a + o("process-info.idle-ms")),
		BufferedBytes: u64(a + o("process-info.buffered-bytes")),
		BytesDropped:  u64(a + o("process-info.bytes-dropped")),
		StdinOpen:     u8(a+o("process-info.stdin-open")) != 0,
		CPUMs:         liftOptU64(a + o("process-info.cpu-ms")),
		MemBytesPeak:  liftOptU64(a + o("process-info.mem-bytes-peak")),
	}
	if r := a + o("process-info.exit-reason"); u8(r) != 0 {
		i.ExitReason = cm.Some(ExitReason(u8(r + 1)))
	}
	return i
}

func liftProcessInfos(a uint32) cm.List[ProcessInfo] {
	p, n := u32(a), u32(a+4)
	out := make([]ProcessInfo, n)
	for i := range out {
		out[i] = liftProcessInfo(p + uint32(i)*o("process-info"))
	}
	return cm.ToList(out)
}

func liftLogChunk(a uint32) LogChunk {
	return LogChunk{
		Data:         liftBytes(a + o("log-chunk.data")),
		Next:         liftString(a + o("log-chunk.next")),
		BytesDropped: u64(a + o("log-chunk.bytes-dropped")),
		EOF:          u8(a+o("log-chunk.eof")) != 0,
	}
}

func liftEventBatch(a uint32) EventBatch {
	p, n := u32(a+o("event-batch.events")), u32(a+o("event-batch.events")+4)
	evs := make([]ProcessEvent, n)
	for i := range evs {
		e := p + uint32(i)*o("process-event")
		k := e + o("process-event.kind")
		ev := ProcessEvent{Seq: u64(e + o("process-event.seq")), ID: ProcessID(liftString(e + o("process-event.id")))}
		ev.Kind.tag = u8(k)
		switch ev.Kind.tag {
		case 0:
			x := k + eventKindVal
			ev.Kind.exited = ExitEvent{Exit: liftExit(x + o("exit-event.exit")), Reason: ExitReason(u8(x + o("exit-event.reason")))}
		case 1:
			ev.Kind.stream = LogStream(u8(k + eventKindVal))
		}
		evs[i] = ev
	}
	return EventBatch{Events: cm.ToList(evs), Next: u64(a + o("event-batch.next")), Missed: u64(a + o("event-batch.missed"))}
}

func (l Layout) liftError(a uint32) ErrorCode {
	e := ErrorCode{tag: u8(a)}
	switch {
	case errorCaseHasString[e.tag]:
		e.s = liftString(a + l.ErrPayload)
	case e.tag == errTornWrite:
		e.n = u64(a + l.ErrPayload)
	}
	return e
}

// liftResult reads result<T, error-code> from the return area at a; T's
// payload is at max(align(T), align(error-code)).
func liftResult[T any](l Layout, a, tAlign uint32, ok func(uint32) T) Result[T] {
	off := max(tAlign, l.ErrAlign)
	if u8(a) != 0 {
		return Result[T]{isErr: true, err: l.liftError(a + off)}
	}
	var r Result[T]
	if ok != nil {
		r.ok = ok(a + off)
	}
	return r
}

// area is a return area: 8-aligned, kept alive by the caller.
type area []uint64

func newArea() area         { return make(area, areaWords) }
func (a area) addr() uint32 { return addr(unsafe.Pointer(&a[0])) }

// lowerer lowers arguments into Go memory and keeps every block alive
// until the import call returns (runtime.KeepAlive in the callers).
type lowerer struct{ keep []any }

func (l *lowerer) str(s string) (uint32, uint32) {
	if len(s) == 0 {
		return 1, 0
	}
	l.keep = append(l.keep, s)
	return addr(unsafe.Pointer(unsafe.StringData(s))), uint32(len(s))
}

func (l *lowerer) bytes(b []byte) (uint32, uint32) {
	if len(b) == 0 {
		return 1, 0
	}
	l.keep = append(l.keep, b)
	return addr(unsafe.Pointer(&b[0])), uint32(len(b))
}

// words allocates n 8-aligned bytes.
func (l *lowerer) words(n uint32) (uint32, []byte) {
	w := make([]uint64, (n+7)/8+1)
	l.keep = append(l.keep, w)
	p := addr(unsafe.Pointer(&w[0]))
	return p, mem(p, n)
}

func put32(b []byte, off, v uint32)        { binary.LittleEndian.PutUint32(b[off:], v) }
func put64(b []byte, off uint32, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }

func (l *lowerer) strList(ss []string) (uint32, uint32) {
	if len(ss) == 0 {
		return 4, 0
	}
	p, b := l.words(uint32(len(ss)) * 8)
	for i, s := range ss {
		sp, sn := l.str(s)
		put32(b, uint32(i)*8, sp)
		put32(b, uint32(i)*8+4, sn)
	}
	return p, uint32(len(ss))
}

func (l *lowerer) envList(es []EnvVar) (uint32, uint32) {
	if len(es) == 0 {
		return 4, 0
	}
	sz := o("env-var")
	p, b := l.words(uint32(len(es)) * sz)
	for i, e := range es {
		base := uint32(i) * sz
		kp, kn := l.str(e.Key)
		vp, vn := l.str(e.Value)
		put32(b, base+o("env-var.key"), kp)
		put32(b, base+o("env-var.key")+4, kn)
		put32(b, base+o("env-var.value"), vp)
		put32(b, base+o("env-var.value")+4, vn)
	}
	return p, uint32(len(es))
}

// flatRequest is spawn-request flattened to its 14 core values.
type flatRequest struct {
	cmdP, cmdN, argsP, argsN, stdinD, stdinP, stdinN, envP, envN, cwdD, cwdP, cwdN, toD uint32
	to                                                                                  uint64
}

func (l *lowerer) request(r SpawnRequest) flatRequest {
	var f flatRequest
	f.cmdP, f.cmdN = l.str(r.Cmd)
	f.argsP, f.argsN = l.strList(r.Args.Slice())
	if s := r.Stdin.Some(); s != nil {
		f.stdinD = 1
		f.stdinP, f.stdinN = l.bytes(s.Slice())
	}
	f.envP, f.envN = l.envList(r.Env.Slice())
	if c := r.CWD.Some(); c != nil {
		f.cwdD = 1
		f.cwdP, f.cwdN = l.str(*c)
	}
	if t := r.TimeoutMs.Some(); t != nil {
		f.toD, f.to = 1, *t
	}
	return f
}

func putOptU64(b []byte, off uint32, v cm.Option[uint64]) {
	if p := v.Some(); p != nil {
		b[off] = 1
		put64(b, off+optU64Val, *p)
	}
}

func putOptU32(b []byte, off uint32, v cm.Option[uint32]) {
	if p := v.Some(); p != nil {
		b[off] = 1
		put32(b, off+optU32Val, *p)
	}
}

// persistParams lays out tuple<spawn-request, persist-options> in memory:
// spawn-persistent flattens to more than 16 values, so its params travel
// by pointer.
func (l *lowerer) persistParams(r SpawnRequest, po PersistOptions) uint32 {
	reqSize := o("spawn-request")
	p, b := l.words(reqSize + o("persist-options"))
	f := l.request(r)
	put32(b, o("spawn-request.cmd"), f.cmdP)
	put32(b, o("spawn-request.cmd")+4, f.cmdN)
	put32(b, o("spawn-request.args"), f.argsP)
	put32(b, o("spawn-request.args")+4, f.argsN)
	b[o("spawn-request.stdin")] = byte(f.stdinD)
	put32(b, o("spawn-request.stdin")+optU32Val, f.stdinP)
	put32(b, o("spawn-request.stdin")+optU32Val+4, f.stdinN)
	put32(b, o("spawn-request.env"), f.envP)
	put32(b, o("spawn-request.env")+4, f.envN)
	b[o("spawn-request.cwd")] = byte(f.cwdD)
	put32(b, o("spawn-request.cwd")+optU32Val, f.cwdP)
	put32(b, o("spawn-request.cwd")+optU32Val+4, f.cwdN)
	putOptU64(b, o("spawn-request.timeout-ms"), r.TimeoutMs)

	ob := b[reqSize:]
	if lbl := po.Label.Some(); lbl != nil {
		sp, sn := l.str(*lbl)
		ob[o("persist-options.label")] = 1
		put32(ob, o("persist-options.label")+optU32Val, sp)
		put32(ob, o("persist-options.label")+optU32Val+4, sn)
	}
	if po.KeepStdinOpen {
		ob[o("persist-options.keep-stdin-open")] = 1
	}
	ob[o("persist-options.overflow")] = byte(po.Overflow)
	putOptU32(ob, o("persist-options.log-ring-bytes"), po.LogRingBytes)
	putOptU64(ob, o("persist-options.max-lifetime-ms"), po.MaxLifetimeMs)
	putOptU64(ob, o("persist-options.idle-timeout-ms"), po.IdleTimeoutMs)
	putOptU64(ob, o("persist-options.exit-retention-ms"), po.ExitRetentionMs)
	lim := o("persist-options.limits")
	putOptU64(ob, lim+o("resource-limits.max-memory-bytes"), po.Limits.MaxMemoryBytes)
	putOptU64(ob, lim+o("resource-limits.max-cpu-ms"), po.Limits.MaxCPUMs)
	putOptU32(ob, lim+o("resource-limits.max-pids"), po.Limits.MaxPids)
	putOptU32(ob, lim+o("resource-limits.max-open-files"), po.Limits.MaxOpenFiles)
	return p
}

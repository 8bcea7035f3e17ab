package process

import (
	"math"
	gostrings "strings"
	"time"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
)

// Conversions between lifted WIT values (cabi.Value) and registry types.
// Lifting has already checked every shape against its descriptor, so the
// type assertions here cannot fail for values produced by cabi.

// msDur converts WIT milliseconds to a Duration, saturating instead of
// overflowing (the registry clamps to its ceilings).
func msDur(ms uint64) time.Duration {
	if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// durMs converts a Duration to WIT milliseconds (negative: 0).
func durMs(d time.Duration) uint64 {
	if d < 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}

func optString(v cabi.Value) *string {
	o := v.(cabi.Variant)
	if o.Case == 0 {
		return nil
	}
	s := o.Payload.(string)
	return &s
}

func optDur(v cabi.Value) *time.Duration {
	o := v.(cabi.Variant)
	if o.Case == 0 {
		return nil
	}
	d := msDur(o.Payload.(uint64))
	return &d
}

func optU32(v cabi.Value) *uint32 {
	o := v.(cabi.Variant)
	if o.Case == 0 {
		return nil
	}
	x := o.Payload.(uint32)
	return &x
}

func optU64(v cabi.Value) *uint64 {
	o := v.(cabi.Variant)
	if o.Case == 0 {
		return nil
	}
	x := o.Payload.(uint64)
	return &x
}

func stringList(v cabi.Value) []string {
	vs := v.([]cabi.Value)
	out := make([]string, len(vs))
	for i, s := range vs {
		out[i] = s.(string)
	}
	return out
}

func spawnRequest(v cabi.Value) registry.SpawnRequest {
	f := v.([]cabi.Value)
	r := registry.SpawnRequest{
		Cmd:     f[0].(string),
		Args:    stringList(f[1]),
		Timeout: optDur(f[5]),
	}
	if in := f[2].(cabi.Variant); in.Case == 1 {
		r.Stdin, r.HasStdin = in.Payload.([]byte), true
	}
	for _, e := range f[3].([]cabi.Value) {
		kv := e.([]cabi.Value)
		r.Env = append(r.Env, registry.EnvVar{Key: kv[0].(string), Value: kv[1].(string)})
	}
	if cwd := optString(f[4]); cwd != nil {
		r.Cwd = *cwd
	}
	return r
}

// persistOptions lifts persist-options; v12 reads 1.2.0's terminal field
// (1.1.0's record ends before it: a 1.1.0 spawn is always on pipes).
func persistOptions(v cabi.Value, v12 bool) registry.PersistOptions {
	f := v.([]cabi.Value)
	l := f[7].([]cabi.Value)
	var cpu *time.Duration
	if ms := optU64(l[1]); ms != nil {
		d := msDur(*ms)
		cpu = &d
	}
	o := registry.PersistOptions{
		Label:         optString(f[0]),
		KeepStdinOpen: f[1].(bool),
		Overflow:      overflowPolicy(f[2].(uint32)),
		LogRingBytes:  optU32(f[3]),
		MaxLifetime:   optDur(f[4]),
		IdleTimeout:   optDur(f[5]),
		ExitRetention: optDur(f[6]),
		Limits: registry.Limits{
			MaxMemoryBytes: optU64(l[0]),
			MaxCPU:         cpu,
			MaxPids:        optU32(l[2]),
			MaxOpenFiles:   optU32(l[3]),
		},
	}
	if v12 {
		if t := f[8].(cabi.Variant); t.Case == 1 {
			ts := t.Payload.([]cabi.Value)
			o.Terminal = &registry.TerminalOptions{Rows: ts[0].(uint16), Cols: ts[1].(uint16)}
			if term := optString(ts[2]); term != nil {
				o.Terminal.Term = *term
			}
		}
	}
	return o
}

func someOrNone(p bool, v cabi.Value) cabi.Variant {
	if !p {
		return cabi.None
	}
	return cabi.Some(v)
}

func exitInfo(e registry.Exit) cabi.Value {
	code, sig := cabi.None, cabi.None
	if e.Code != nil {
		code = cabi.Some(*e.Code)
	}
	if e.Signal != nil {
		sig = cabi.Some(*e.Signal)
	}
	return []cabi.Value{code, sig}
}

func optExit(e *registry.Exit) cabi.Variant {
	if e == nil {
		return cabi.None
	}
	return cabi.Some(exitInfo(*e))
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func processResult(r registry.Result) cabi.Value {
	return []cabi.Value{nonNil(r.Stdout), nonNil(r.Stderr), exitInfo(r.Exit), r.Truncated}
}

func readLogsResult(l registry.Logs) cabi.Value {
	return []cabi.Value{nonNil(l.Stdout), nonNil(l.Stderr), l.Running, optExit(l.Exit), l.BytesDropped}
}

func logChunk(c registry.LogChunk) cabi.Value {
	return []cabi.Value{nonNil(c.Data), c.Next, c.BytesDropped, c.EOF}
}

// processInfo lowers process-info; v12 adds 1.2.0's four fields (the
// 1.2.0→1.1.0 mapping drops them).
func processInfo(i registry.Info, v12 bool) cabi.Value {
	pid := cabi.None
	if i.OSPid != nil {
		pid = cabi.Some(*i.OSPid)
	}
	reason := cabi.None
	if i.Reason != nil {
		reason = cabi.Some(uint32(*i.Reason))
	}
	cpu := cabi.None
	if i.CPU != nil {
		cpu = cabi.Some(durMs(*i.CPU))
	}
	mem := cabi.None
	if i.MemPeak != nil {
		mem = cabi.Some(*i.MemPeak)
	}
	out := []cabi.Value{
		i.ID, utf8Safe(i.Label), utf8Safe(i.Command), pid, uint32(i.Phase), optExit(i.Exit), reason,
		durMs(i.Age), durMs(i.Idle), i.BufferedBytes, i.BytesDropped, i.StdinOpen, cpu, mem,
	}
	if v12 {
		out = append(out, infoTerminal(i)...)
	}
	return out
}

// infoTerminal is process-info's 1.2.0 tail: terminal, waiting-for-input,
// reap-in-ms, reap-rule.
func infoTerminal(i registry.Info) []cabi.Value {
	term := cabi.None
	if t := i.Terminal; t != nil {
		term = cabi.Some([]cabi.Value{t.Rows, t.Cols, utf8Safe(t.Term)})
	}
	wait := cabi.None
	if i.WaitingForInput != nil {
		wait = cabi.Some(*i.WaitingForInput)
	}
	reapIn, rule := cabi.None, cabi.None
	if i.ReapIn != nil {
		reapIn = cabi.Some(durMs(*i.ReapIn))
	}
	if i.ReapRule != nil {
		rule = cabi.Some(uint32(*i.ReapRule))
	}
	return []cabi.Value{term, wait, reapIn, rule}
}

func eventBatch(b registry.EventBatch) cabi.Value {
	evs := make([]cabi.Value, len(b.Events))
	for k, e := range b.Events {
		var kind cabi.Variant
		switch e.Kind {
		case registry.EventExited:
			kind = cabi.Variant{Case: 0, Payload: []cabi.Value{exitInfo(e.Exit), uint32(e.Reason)}}
		case registry.EventLogReady:
			kind = cabi.Variant{Case: 1, Payload: uint32(e.Stream)}
		default:
			kind = cabi.Variant{Case: uint32(e.Kind)} // stdin-drained; others fail lowering loudly
		}
		evs[k] = []cabi.Value{e.Seq, e.ID, kind}
	}
	return []cabi.Value{evs, b.Next, b.Missed}
}

// overflowPolicy maps the WIT enum (drop-oldest=0, backpressure=1) to the
// sandbox's Overflow, whose zero value also means drop-oldest.
func overflowPolicy(c uint32) registry.Overflow {
	if c == 1 {
		return sandbox.Backpressure
	}
	return sandbox.DropOldest
}

// utf8Safe keeps display strings that may come from the file system (a
// command's resolved path) valid UTF-8, as a string lowered to a guest
// must be.
func utf8Safe(s string) string { return gostrings.ToValidUTF8(s, "\uFFFD") }

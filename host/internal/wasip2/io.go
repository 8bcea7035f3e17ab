package wasip2

import (
	"context"
	"io"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
)

const (
	rtError    = "error"
	rtPollable = "pollable"
	rtInput    = "input-stream"
	rtOutput   = "output-stream"
)

// maxWrite is what check-write permits at once (the WIT's 4096-byte
// guarantee for blocking-write-and-flush, applied to every write).
const maxWrite = 4096

var (
	// stream-error: variant { last-operation-failed(own<error>), closed }
	tStreamError = cabi.VariantOf("stream-error", cabi.C("last-operation-failed", cabi.Own(rtError)), cabi.C("closed", nil))
	closed       = cabi.Err(cabi.Variant{Case: 1})
	bytesT       = cabi.List(cabi.U8)
)

// pollable is ready at deadline (zero: always ready).
type pollable struct{ deadline time.Time }

type inputStream struct{}

// outputStream writes to w (nil: discarded).
type outputStream struct{ w io.Writer }

func ioDefs() []def {
	const e, p, s = "wasi:io/error", "wasi:io/poll", "wasi:io/streams"
	return []def{
		dropDef(e, rtError),
		{e, cabi.NewFunc(method(rtError, "to-debug-string"), cabi.String, self(rtError)), func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
			st.get(rtError, a[0])
			return "stream error"
		}},
		dropDef(p, rtPollable),
		{p, cabi.NewFunc(method(rtPollable, "ready"), cabi.Bool, self(rtPollable)), func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
			return !time.Now().Before(st.get(rtPollable, a[0]).(*pollable).deadline)
		}},
		{p, cabi.NewFunc(method(rtPollable, "block"), nil, self(rtPollable)), func(ctx context.Context, st *state, a []cabi.Value) cabi.Value {
			wait(ctx, st.get(rtPollable, a[0]).(*pollable).deadline)
			return nil
		}},
		{p, cabi.NewFunc("poll", cabi.List(cabi.U32), cabi.F("in", cabi.List(cabi.Borrow(rtPollable)))), poll},
		dropDef(s, rtInput),
		dropDef(s, rtOutput),
		{s, cabi.NewFunc(method(rtInput, "read"), cabi.Result(bytesT, tStreamError), self(rtInput), cabi.F("len", cabi.U64)), readStdin},
		{s, cabi.NewFunc(method(rtInput, "blocking-read"), cabi.Result(bytesT, tStreamError), self(rtInput), cabi.F("len", cabi.U64)), readStdin},
		{s, cabi.NewFunc(method(rtInput, "skip"), cabi.Result(cabi.U64, tStreamError), self(rtInput), cabi.F("len", cabi.U64)), readStdin},
		{s, cabi.NewFunc(method(rtInput, "blocking-skip"), cabi.Result(cabi.U64, tStreamError), self(rtInput), cabi.F("len", cabi.U64)), readStdin},
		{s, cabi.NewFunc(method(rtInput, "subscribe"), cabi.Own(rtPollable), self(rtInput)), func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
			st.get(rtInput, a[0])
			return st.add(rtPollable, &pollable{})
		}},
		{s, cabi.NewFunc(method(rtOutput, "check-write"), cabi.Result(cabi.U64, tStreamError), self(rtOutput)), func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
			st.get(rtOutput, a[0])
			return cabi.Ok(uint64(maxWrite))
		}},
		{s, cabi.NewFunc(method(rtOutput, "write"), cabi.Result(nil, tStreamError), self(rtOutput), cabi.F("contents", bytesT)), write},
		{s, cabi.NewFunc(method(rtOutput, "blocking-write-and-flush"), cabi.Result(nil, tStreamError), self(rtOutput), cabi.F("contents", bytesT)), write},
		{s, cabi.NewFunc(method(rtOutput, "flush"), cabi.Result(nil, tStreamError), self(rtOutput)), flush},
		{s, cabi.NewFunc(method(rtOutput, "blocking-flush"), cabi.Result(nil, tStreamError), self(rtOutput)), flush},
		{s, cabi.NewFunc(method(rtOutput, "write-zeroes"), cabi.Result(nil, tStreamError), self(rtOutput), cabi.F("len", cabi.U64)), writeZeroes},
		{s, cabi.NewFunc(method(rtOutput, "blocking-write-zeroes-and-flush"), cabi.Result(nil, tStreamError), self(rtOutput), cabi.F("len", cabi.U64)), writeZeroes},
		{s, cabi.NewFunc(method(rtOutput, "subscribe"), cabi.Own(rtPollable), self(rtOutput)), func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
			st.get(rtOutput, a[0])
			return st.add(rtPollable, &pollable{})
		}},
	}
}

// readStdin: stdin is empty, so every read and skip says closed.
func readStdin(_ context.Context, st *state, a []cabi.Value) cabi.Value {
	st.get(rtInput, a[0])
	return closed
}

func write(_ context.Context, st *state, a []cabi.Value) cabi.Value {
	o := st.get(rtOutput, a[0]).(*outputStream)
	b := a[1].([]byte)
	if len(b) > maxWrite {
		engine.Trapf("output-stream.write of %d bytes, more than check-write permitted (%d)", len(b), maxWrite)
	}
	if o.w != nil && len(b) > 0 {
		if _, err := o.w.Write(b); err != nil {
			return cabi.Err(cabi.Variant{Case: 0, Payload: st.add(rtError, err)})
		}
	}
	return cabi.Ok(nil)
}

func writeZeroes(ctx context.Context, st *state, a []cabi.Value) cabi.Value {
	n := a[1].(uint64)
	if n > maxWrite {
		engine.Trapf("output-stream.write-zeroes of %d bytes, more than check-write permitted (%d)", n, maxWrite)
	}
	return write(ctx, st, []cabi.Value{a[0], make([]byte, n)})
}

func flush(_ context.Context, st *state, a []cabi.Value) cabi.Value {
	st.get(rtOutput, a[0])
	return cabi.Ok(nil)
}

// poll returns the indices of the ready pollables, blocking until the
// earliest deadline (bounded by the call's context) when none is.
func poll(ctx context.Context, st *state, a []cabi.Value) cabi.Value {
	in := a[0].([]cabi.Value)
	if len(in) == 0 {
		engine.Trapf("poll of an empty list")
	}
	ps := make([]*pollable, len(in))
	earliest := time.Time{}
	for i, h := range in {
		ps[i] = st.get(rtPollable, h).(*pollable)
		if i == 0 || ps[i].deadline.Before(earliest) {
			earliest = ps[i].deadline
		}
	}
	wait(ctx, earliest)
	now := time.Now()
	var out []cabi.Value
	for i, p := range ps {
		if !now.Before(p.deadline) {
			out = append(out, uint32(i))
		}
	}
	return out
}

// wait sleeps until t or until ctx ends (a trap: the call is over).
func wait(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		engine.Trapf("poll interrupted: %v", ctx.Err())
	}
}

package wasip2

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
)

func cliDefs() []def {
	const env, exit = "wasi:cli/environment", "wasi:cli/exit"
	pair := cabi.Record("tuple", cabi.F("0", cabi.String), cabi.F("1", cabi.String))
	empty := func(context.Context, *state, []cabi.Value) cabi.Value { return []cabi.Value{} }
	none := func(context.Context, *state, []cabi.Value) cabi.Value { return cabi.None }
	defs := []def{
		{env, cabi.NewFunc("get-environment", cabi.List(pair)), empty},
		{env, cabi.NewFunc("get-arguments", cabi.List(cabi.String)), empty},
		{env, cabi.NewFunc("initial-cwd", cabi.Option(cabi.String)), none},
		{exit, cabi.NewFunc("exit", nil, cabi.F("status", cabi.Result(nil, nil))), func(_ context.Context, _ *state, a []cabi.Value) cabi.Value {
			// The same words as preview1 proc_exit on both engines.
			engine.Trapf("guest exited with code %d", a[0].(cabi.Variant).Case)
			return nil
		}},
		{"wasi:cli/stdin", cabi.NewFunc("get-stdin", cabi.Own(rtInput)), func(_ context.Context, st *state, _ []cabi.Value) cabi.Value {
			return st.add(rtInput, &inputStream{})
		}},
		{"wasi:cli/stdout", cabi.NewFunc("get-stdout", cabi.Own(rtOutput)), func(_ context.Context, st *state, _ []cabi.Value) cabi.Value {
			return st.add(rtOutput, &outputStream{w: st.cfg.Stdout})
		}},
		{"wasi:cli/stderr", cabi.NewFunc("get-stderr", cabi.Own(rtOutput)), func(_ context.Context, st *state, _ []cabi.Value) cabi.Value {
			return st.add(rtOutput, &outputStream{w: st.cfg.Stderr})
		}},
		dropDef("wasi:cli/terminal-input", "terminal-input"),
		dropDef("wasi:cli/terminal-output", "terminal-output"),
	}
	for _, t := range []struct{ std, rt string }{{"stdin", "terminal-input"}, {"stdout", "terminal-output"}, {"stderr", "terminal-output"}} {
		defs = append(defs, def{"wasi:cli/terminal-" + t.std, cabi.NewFunc("get-terminal-"+t.std, cabi.Option(cabi.Own(t.rt))), none})
	}
	return defs
}

// epoch is the monotonic clock's zero.
var epoch = time.Now()

func clockDefs() []def {
	const mono, wall = "wasi:clocks/monotonic-clock", "wasi:clocks/wall-clock"
	datetime := cabi.Record("datetime", cabi.F("seconds", cabi.U64), cabi.F("nanoseconds", cabi.U32))
	monoNow := func() uint64 { return uint64(time.Since(epoch)) }
	return []def{
		{mono, cabi.NewFunc("now", cabi.U64), func(context.Context, *state, []cabi.Value) cabi.Value { return monoNow() }},
		{mono, cabi.NewFunc("resolution", cabi.U64), func(context.Context, *state, []cabi.Value) cabi.Value { return uint64(1) }},
		{mono, cabi.NewFunc("subscribe-instant", cabi.Own(rtPollable), cabi.F("when", cabi.U64)), func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
			return st.add(rtPollable, &pollable{deadline: epoch.Add(clampDuration(a[0].(uint64)))})
		}},
		{mono, cabi.NewFunc("subscribe-duration", cabi.Own(rtPollable), cabi.F("when", cabi.U64)), func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
			return st.add(rtPollable, &pollable{deadline: time.Now().Add(clampDuration(a[0].(uint64)))})
		}},
		{wall, cabi.NewFunc("now", datetime), func(context.Context, *state, []cabi.Value) cabi.Value {
			t := time.Now()
			return []cabi.Value{uint64(t.Unix()), uint32(t.Nanosecond())}
		}},
		{wall, cabi.NewFunc("resolution", datetime), func(context.Context, *state, []cabi.Value) cabi.Value {
			return []cabi.Value{uint64(0), uint32(1)}
		}},
	}
}

// clampDuration keeps a guest's u64 nanoseconds inside time.Duration.
func clampDuration(ns uint64) time.Duration {
	if ns > 1<<62 {
		return 1 << 62
	}
	return time.Duration(ns)
}

// maxRandom bounds one get-random-bytes (the guest asks for a u64).
const maxRandom = 1 << 20

func randomDefs() []def {
	const r, ins, seed = "wasi:random/random", "wasi:random/insecure", "wasi:random/insecure-seed"
	bytes := func(_ context.Context, _ *state, a []cabi.Value) cabi.Value {
		n := a[0].(uint64)
		if n > maxRandom {
			engine.Trapf("get-random-bytes of %d bytes (at most %d)", n, maxRandom)
		}
		b := make([]byte, n)
		_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
		return b
	}
	u64 := func(context.Context, *state, []cabi.Value) cabi.Value {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return binary.LittleEndian.Uint64(b[:])
	}
	return []def{
		{r, cabi.NewFunc("get-random-bytes", cabi.List(cabi.U8), cabi.F("len", cabi.U64)), bytes},
		{r, cabi.NewFunc("get-random-u64", cabi.U64), u64},
		{ins, cabi.NewFunc("get-insecure-random-bytes", cabi.List(cabi.U8), cabi.F("len", cabi.U64)), bytes},
		{ins, cabi.NewFunc("get-insecure-random-u64", cabi.U64), u64},
		{seed, cabi.NewFunc("insecure-seed", cabi.Record("tuple", cabi.F("0", cabi.U64), cabi.F("1", cabi.U64))), func(ctx context.Context, st *state, a []cabi.Value) cabi.Value {
			return []cabi.Value{u64(ctx, st, a), u64(ctx, st, a)}
		}},
	}
}

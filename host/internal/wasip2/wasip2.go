// Package wasip2 serves the WASI 0.2 interfaces component guests import
// (what the wasi_snapshot_preview1 reactor adapter and componentize-js
// need), as engine.HostFuncs over the Canonical ABI code of
// host/internal/cabi, with no ambient authority:
//   - an empty environment and no arguments;
//   - stdin is empty (every read says the stream is closed);
//   - stdout and stderr go to the instance's writers (the host's
//     capsule-prefixed, bounded log), as preview1 fd_write does;
//   - real clocks and a CSPRNG (crypto/rand, also for "insecure" random);
//   - wasi:filesystem with zero preopens: no descriptor ever exists, and
//     every descriptor method answers error-code bad-descriptor, without
//     touching the host filesystem;
//   - no terminals (every terminal-* getter says none).
//
// The functions are served under version Version; a component importing
// any semver-compatible 0.2.x is resolved onto them (host/component).
package wasip2

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
)

// Version is the WASI 0.2 release whose WIT these functions implement.
const Version = "0.2.12"

// ErrResource: a WASI resource handle that is not live (dropped twice,
// never made or forged). The call traps with these words.
var ErrResource = errors.New("invalid WASI resource handle")

// Config is one instance's view of the world.
type Config struct {
	Stdout, Stderr io.Writer // nil: discarded
}

// state is one instance's WASI resources.
type state struct {
	cfg     Config
	handles cabi.Table[any]
}

// def is one WIT function and its implementation.
type def struct {
	iface string // "wasi:io/streams"
	f     *cabi.Func
	impl  func(ctx context.Context, st *state, a []cabi.Value) cabi.Value
}

// Funcs returns the host functions of one instance, with their own
// resource tables.
func Funcs(cfg Config) []engine.HostFunc {
	st := &state{cfg: cfg}
	var out []engine.HostFunc
	for _, group := range [][]def{ioDefs(), cliDefs(), clockDefs(), randomDefs(), filesystemDefs()} {
		for _, d := range group {
			out = append(out, bind(st, d))
		}
	}
	return out
}

// Modules are the interfaces served, with Version.
func Modules() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range Funcs(Config{}) {
		if !seen[f.Module] {
			seen[f.Module] = true
			out = append(out, f.Module)
		}
	}
	return out
}

func bind(st *state, d def) engine.HostFunc {
	params, results := d.f.ImportSignature()
	module := d.iface + "@" + Version
	return engine.HostFunc{Module: module, Name: d.f.Name, Params: params, Results: results,
		Fn: func(ctx context.Context, c engine.Caller, stack []uint64) {
			defer func() {
				// Only *engine.Trap may leave a host function.
				if r := recover(); r != nil {
					if _, ok := r.(*engine.Trap); ok {
						panic(r)
					}
					panic(&engine.Trap{Reason: fmt.Sprintf("%s#%s: host fault: %v", module, d.f.Name, r)})
				}
			}()
			args, err := d.f.LiftParams(c.Memory(), stack)
			if err != nil {
				engine.Trapf("%s#%s: %v", module, d.f.Name, err)
			}
			res := d.impl(ctx, st, args)
			if err := d.f.LowerResult(ctx, c, stack, res); err != nil {
				engine.Trapf("%s#%s: lowering the result: %v", module, d.f.Name, err)
			}
		}}
}

// add makes a new handle of resource type rt.
func (st *state) add(rt string, v any) uint32 {
	h, err := st.handles.Add(rt, v)
	if err != nil {
		engine.Trapf("%v", err)
	}
	return h
}

// get is the live handle h of rt, or a trap.
func (st *state) get(rt string, h cabi.Value) any {
	v, err := st.handles.Get(rt, h.(uint32))
	if err != nil {
		engine.Trapf("%v: %v", ErrResource, err)
	}
	return v
}

// dropImpl removes handle h of rt, or traps (dropped twice, forged).
func dropImpl(rt string) func(context.Context, *state, []cabi.Value) cabi.Value {
	return func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
		if _, err := st.handles.Remove(rt, a[0].(uint32)); err != nil {
			engine.Trapf("%v: %v", ErrResource, err)
		}
		return nil
	}
}

func dropDef(iface, rt string) def {
	return def{iface, cabi.NewFunc("[resource-drop]"+rt, nil, cabi.F("self", cabi.Own(rt))), dropImpl(rt)}
}

func method(rt, name string) string { return "[method]" + rt + "." + name }

func self(rt string) cabi.Field { return cabi.F("self", cabi.Borrow(rt)) }

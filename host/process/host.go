// Package process serves the capsule:process host interfaces to guests:
// capsule:process/host@1.2.0 and, from the same implementation through
// total mappings, @1.1.0 (1.2.0 without the terminal tier: the same error
// codes, process-info without its four 1.2.0 fields, persist-options
// without a terminal) and @1.0.0 (the ephemeral tier, with a total mapping
// of error codes). Each host function lifts its arguments with
// host/internal/cabi, calls the registry with the caller and instance
// carried by the context, and lowers the result. The bindings are hand-written over descriptors (wit.go); the
// abi-tests module checks them against the WIT parser.
package process

import (
	"context"
	"errors"
	"fmt"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
)

// version is what differs between the served interface versions.
type version struct {
	module    string
	rt        string // the process-handle resource type, per version
	v11       bool   // error-code@1.1.0 (also 1.2.0's)
	v12       bool   // process-info and persist-options of 1.2.0
	errorCode *cabi.Type
	signal    *cabi.Type
	info      *cabi.Type // process-info (1.1.0 on)
	options   *cabi.Type // persist-options (1.1.0 on)
	funcs     []def
}

// def is one WIT function and its implementation.
type def struct {
	f         *cabi.Func
	needsInst bool // uses the handle table
	impl      func(c *call, a []cabi.Value) cabi.Value
}

// call is one invocation of a host function.
type call struct {
	ctx  context.Context
	reg  *registry.Registry
	v    *version
	inst *Instance // set when the def needs it
	name string
}

// fail lowers a registry error to result::error(error-code).
func (c *call) fail(err error) cabi.Value {
	return cabi.Err(errorCode(err, c.v.errorCode, c.v.v11))
}

// trap aborts the call; the engine turns it into a call error and the host
// discards the instance.
func (c *call) trap(format string, args ...any) {
	engine.Trapf("%s#%s: %s", c.v.module, c.name, fmt.Sprintf(format, args...))
}

// handle lifts a borrow<process-handle>.
func (c *call) handle(a cabi.Value) *registry.Handle {
	h, err := c.inst.get(c.v.rt, a.(uint32))
	if err != nil {
		c.trap("%v", err)
	}
	return h
}

// own lowers a new own<process-handle> into the instance's table. A
// handle over the instance's cap (MaxHandles) is dropped and the guest
// gets error-code quota; a table at the Canonical ABI's bound traps (as
// its Table.add does) after dropping h. Either way nothing leaks.
func (c *call) own(h *registry.Handle) cabi.Value {
	idx, err := c.inst.add(c.v.rt, h)
	if err != nil {
		if derr := h.Drop(c.ctx); derr != nil {
			c.inst.logger().Warn("dropping a process-handle that did not fit the table", "err", derr)
		}
		if errors.Is(err, ErrHandleLimit) {
			return c.fail(err)
		}
		c.trap("%v", err)
	}
	return cabi.Ok(idx)
}

// HostFuncs returns the core host functions of every served version, bound
// to reg. Every function takes the registry.Caller (registry.WithCaller)
// and, for handles, the Instance (WithInstance) from its context; a call
// without them traps naming what is missing.
func HostFuncs(reg *registry.Registry) []engine.HostFunc {
	var out []engine.HostFunc
	for _, v := range []*version{ver10, ver11, ver12} {
		for _, d := range v.funcs {
			out = append(out, bind(reg, v, d))
		}
	}
	return out
}

func bind(reg *registry.Registry, v *version, d def) engine.HostFunc {
	params, results := d.f.ImportSignature()
	name := d.f.Name
	return engine.HostFunc{
		Module:  v.module,
		Name:    name,
		Params:  params,
		Results: results,
		Fn: func(ctx context.Context, ec engine.Caller, stack []uint64) {
			defer func() {
				// Only *engine.Trap may leave a host function: anything
				// else is a host fault, reported as a trap with its reason
				// instead of crashing the host.
				if r := recover(); r != nil {
					if _, ok := r.(*engine.Trap); ok {
						panic(r)
					}
					panic(&engine.Trap{Reason: fmt.Sprintf("%s#%s: host fault: %v", v.module, name, r)})
				}
			}()
			c := call{ctx: ctx, reg: reg, v: v, name: name}
			if _, ok := registry.CallerFrom(ctx); !ok {
				c.trap("no registry.Caller in the call context (the host must set it with registry.WithCaller)")
			}
			if d.needsInst {
				inst, ok := InstanceFrom(ctx)
				if !ok {
					c.trap("no process.Instance in the call context (the host must set it with process.WithInstance)")
				}
				c.inst = inst
			}
			if ec == nil {
				c.trap("no calling instance")
			}
			mem := ec.Memory()
			if mem == nil && d.f.UsesMemory() {
				c.trap("the guest exports no memory")
			}
			args, err := d.f.LiftParams(mem, stack)
			if err != nil {
				c.trap("%v", err)
			}
			res := d.impl(&c, args)
			if err := d.f.LowerResult(ctx, ec, stack, res); err != nil {
				c.trap("lowering the result: %v", err)
			}
		},
	}
}

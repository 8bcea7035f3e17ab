// Package tool calls the exports of capsule:guest/tool@1.0.0 on a guest
// instance: describe and call, lowering arguments through the guest's
// cabi_realloc, lifting results from the returned pointer with every
// check the Canonical ABI makes (alignment, bounds, UTF-8), then calling
// the guest's cabi_post_* so it can free what it returned.
package tool

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
)

// Export names (the legacy core-module mangling "ns:pkg/iface@ver#func")
// and their post-return hooks.
const (
	Interface      = "capsule:guest/tool@1.0.0"
	ExportDescribe = Interface + "#describe"
	ExportCall     = Interface + "#call"
	PostPrefix     = "cabi_post_"
)

// Spec is one tool-spec record.
type Spec struct {
	Name, Description, InputSchema string
}

// ErrBadResult: the guest's result breaks the Canonical ABI (a pointer
// out of bounds or misaligned, invalid UTF-8, a bad discriminant, a wrong
// result count). The host must discard the instance. errors.Is also
// matches cabi.ErrABI.
var ErrBadResult = errors.New("guest returned a malformed result")

// ErrInvalidArg: a tool name or input is not valid UTF-8 (a WIT string
// must be); nothing was called.
var ErrInvalidArg = errors.New("invalid tool call argument")

var (
	tToolSpec = cabi.Record("tool-spec",
		cabi.F("name", cabi.String),
		cabi.F("description", cabi.String),
		cabi.F("input-schema", cabi.String),
	)
	// describe: func() -> list<tool-spec>
	// core export: (func (result i32)), the i32 pointing at (ptr, len).
	fDescribe = cabi.NewFunc("describe", cabi.List(tToolSpec))
	// call: func(name: string, input: string) -> result<string, string>
	// core export: (func (param i32 i32 i32 i32) (result i32)).
	fCall = cabi.NewFunc("call", cabi.Result(cabi.String, cabi.String), cabi.F("name", cabi.String), cabi.F("input", cabi.String))
)

// Signatures returns the core types the host expects of the two exports,
// for validating a module before instantiating it.
func Signatures() []engine.FuncDef {
	dp, dr := fDescribe.ExportSignature()
	cp, cr := fCall.ExportSignature()
	return []engine.FuncDef{
		{Name: ExportDescribe, Params: dp, Results: dr},
		{Name: ExportCall, Params: cp, Results: cr},
	}
}

// Describe calls describe and returns the capsule's tools.
func Describe(ctx context.Context, inst engine.Instance) ([]Spec, error) {
	res, err := inst.Call(ctx, ExportDescribe)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ExportDescribe, err)
	}
	v, err := fDescribe.LiftResult(inst.Memory(), res)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadResult, ExportDescribe, err)
	}
	if err := postReturn(ctx, inst, ExportDescribe, res); err != nil {
		return nil, err
	}
	vs := v.([]cabi.Value)
	out := make([]Spec, len(vs))
	for i, s := range vs {
		f := s.([]cabi.Value)
		out[i] = Spec{Name: f[0].(string), Description: f[1].(string), InputSchema: f[2].(string)}
	}
	return out, nil
}

// Call calls the tool name with input (JSON). It returns the ok output, or
// the guest's error message as toolErr (a failed tool call, not a fault),
// or err for a fault: a trap, an interruption or a malformed result.
func Call(ctx context.Context, inst engine.Instance, name, input string) (output string, toolErr *string, err error) {
	if !utf8.ValidString(name) || !utf8.ValidString(input) {
		return "", nil, fmt.Errorf("%w: %s: tool name and input must be valid UTF-8", ErrInvalidArg, ExportCall)
	}
	args, err := fCall.LowerArgs(ctx, instCaller{ctx, inst}, name, input)
	if err != nil {
		var tr *engine.Trap
		if errors.As(err, &tr) || errors.Is(err, engine.ErrInterrupted) {
			return "", nil, fmt.Errorf("%s: lowering arguments: %w", ExportCall, err)
		}
		return "", nil, fmt.Errorf("%w: %s: lowering arguments: %w", ErrBadResult, ExportCall, err)
	}
	res, err := inst.Call(ctx, ExportCall, args...)
	if err != nil {
		return "", nil, fmt.Errorf("%s(%q): %w", ExportCall, name, err)
	}
	v, err := fCall.LiftResult(inst.Memory(), res)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %s(%q): %w", ErrBadResult, ExportCall, name, err)
	}
	if err := postReturn(ctx, inst, ExportCall, res); err != nil {
		return "", nil, err
	}
	r := v.(cabi.Variant)
	s := r.Payload.(string)
	if r.Case == 1 {
		return "", &s, nil
	}
	return s, nil, nil
}

// postReturn calls cabi_post_<export> with the export's core results, if
// the guest exports it. The seam reports a trap as *engine.Trap and an
// interruption as ErrInterrupted; any other Call error is the missing
// export, which is allowed (a guest with nothing to free).
func postReturn(ctx context.Context, inst engine.Instance, export string, res []uint64) error {
	_, err := inst.Call(ctx, PostPrefix+export, res...)
	if err == nil {
		return nil
	}
	var tr *engine.Trap
	if errors.As(err, &tr) || errors.Is(err, engine.ErrInterrupted) {
		return fmt.Errorf("%s%s: %w", PostPrefix, export, err)
	}
	return nil
}

// instCaller lets the cabi Lowerer allocate in the guest through its
// exported cabi_realloc when the host calls an export.
type instCaller struct {
	ctx  context.Context
	inst engine.Instance
}

func (c instCaller) Memory() engine.Memory { return c.inst.Memory() }

func (c instCaller) Realloc(ctx context.Context, oldPtr, oldSize, align, newSize uint32) (uint32, error) {
	res, err := c.inst.Call(ctx, "cabi_realloc", uint64(oldPtr), uint64(oldSize), uint64(align), uint64(newSize))
	if err != nil {
		return 0, err
	}
	if len(res) != 1 {
		return 0, fmt.Errorf("%w: cabi_realloc returned %d values", cabi.ErrABI, len(res))
	}
	return uint32(res[0]), nil
}

package cabi

import (
	"context"
	"fmt"

	"github.com/capsule-host/capsule-host/host/engine"
)

// Limits of the synchronous Canonical ABI (flatten_functype).
const (
	MaxFlatParams  = 16
	MaxFlatResults = 1
)

// Func is a WIT function type with its core signatures derived once: for
// an import (canon lower: the guest calls the host) and for an export
// (canon lift: the host calls the guest).
type Func struct {
	Name   string
	Params []Field
	Result *Type // nil: no result

	tuple *Type // the params as a record, for params passed by pointer
	flat  []engine.ValueType
}

// NewFunc describes `name: func(params...) -> result` (result nil: none).
func NewFunc(name string, result *Type, params ...Field) *Func {
	f := &Func{Name: name, Params: params, Result: result, tuple: Record("", params...)}
	f.flat = f.tuple.flat
	return f
}

func (f *Func) paramsByPointer() bool { return len(f.flat) > MaxFlatParams }

func (f *Func) resultFlat() []engine.ValueType {
	if f.Result == nil {
		return nil
	}
	return f.Result.flat
}

func (f *Func) resultByPointer() bool { return len(f.resultFlat()) > MaxFlatResults }

// ImportSignature is flatten_functype(ft, 'lower'): params beyond 16 flat
// values become one i32 pointer; results beyond one flat value become a
// trailing i32 return pointer and no core results.
func (f *Func) ImportSignature() (params, results []engine.ValueType) {
	params = f.flat
	if f.paramsByPointer() {
		params = []engine.ValueType{engine.I32}
	}
	params = append([]engine.ValueType(nil), params...)
	if f.resultByPointer() {
		return append(params, engine.I32), nil
	}
	return params, append([]engine.ValueType(nil), f.resultFlat()...)
}

// ExportSignature is flatten_functype(ft, 'lift'): params beyond 16 flat
// values become one i32 pointer the caller allocates with realloc;
// results beyond one flat value come back as one i32 pointer.
func (f *Func) ExportSignature() (params, results []engine.ValueType) {
	params = append([]engine.ValueType(nil), f.flat...)
	if f.paramsByPointer() {
		params = []engine.ValueType{engine.I32}
	}
	results = append([]engine.ValueType(nil), f.resultFlat()...)
	if f.resultByPointer() {
		results = []engine.ValueType{engine.I32}
	}
	return params, results
}

// LiftParams lifts an import's arguments from the core stack, following a
// params pointer when there are more than 16 flat values. It returns one
// Value per param.
func (f *Func) LiftParams(mem engine.Memory, stack []uint64) ([]Value, error) {
	if f.paramsByPointer() {
		if len(stack) < 1 {
			return nil, abiErr("missing params pointer")
		}
		v, err := Load(mem, f.tuple, uint32(stack[0]))
		if err != nil {
			return nil, fmt.Errorf("params of %s: %w", f.Name, err)
		}
		return v.([]Value), nil
	}
	in := flatIn{vals: stack}
	lf := newLifter(mem)
	out := make([]Value, len(f.Params))
	for i, p := range f.Params {
		v, err := lf.liftFlat(p.Type, &in)
		if err != nil {
			return nil, at(p.Name, err)
		}
		out[i] = v
	}
	return out, nil
}

// retptrIndex is where an import's return pointer sits on the stack.
func (f *Func) retptrIndex() int {
	if f.paramsByPointer() {
		return 1
	}
	return len(f.flat)
}

// LowerResult lowers an import's result: onto stack[0] when it flattens
// to at most one value, else to the guest's return pointer, which is
// validated (aligned, in bounds) first.
func (f *Func) LowerResult(ctx context.Context, c engine.Caller, stack []uint64, v Value) error {
	if f.Result == nil {
		return nil
	}
	l := Lowerer{Ctx: ctx, Caller: c}
	if f.resultByPointer() {
		i := f.retptrIndex()
		if len(stack) <= i {
			return abiErr("missing return pointer")
		}
		return l.Store(f.Result, uint32(stack[i]), v)
	}
	if len(stack) < 1 {
		return abiErr("no stack slot for the result of %s", f.Name)
	}
	out, err := l.LowerFlat(f.Result, v, stack[:0:1])
	if err != nil {
		return err
	}
	if len(out) != 1 {
		return abiErr("result of %s lowered to %d values", f.Name, len(out))
	}
	return nil
}

// LowerArgs lowers the host's arguments to an export call (the guest's
// cabi_realloc allocates strings, lists and, beyond 16 flat values, the
// params tuple).
func (f *Func) LowerArgs(ctx context.Context, c engine.Caller, args ...Value) ([]uint64, error) {
	if len(args) != len(f.Params) {
		return nil, fmt.Errorf("%w: %s takes %d params, got %d", ErrABI, f.Name, len(f.Params), len(args))
	}
	l := Lowerer{Ctx: ctx, Caller: c}
	if f.paramsByPointer() {
		p, err := l.alloc(f.tuple.align, f.tuple.size, "params of "+f.Name)
		if err != nil {
			return nil, err
		}
		if err := l.Store(f.tuple, p, args); err != nil {
			return nil, err
		}
		return []uint64{uint64(p)}, nil
	}
	out := make([]uint64, 0, len(f.flat))
	for i, p := range f.Params {
		var err error
		if out, err = l.LowerFlat(p.Type, args[i], out); err != nil {
			return nil, at(p.Name, err)
		}
	}
	return out, nil
}

// LiftResult lifts an export's result from the core results: directly
// from one flat value, else from the returned pointer (validated).
func (f *Func) LiftResult(mem engine.Memory, results []uint64) (Value, error) {
	if f.Result == nil {
		return nil, nil
	}
	if f.resultByPointer() {
		if len(results) != 1 {
			return nil, abiErr("%s returned %d values, want 1 pointer", f.Name, len(results))
		}
		return Load(mem, f.Result, uint32(results[0]))
	}
	return LiftFlat(mem, f.Result, results)
}

// Signature renders the import core type as WAT, for doc comments, tests
// and error messages.
func (f *Func) Signature() string {
	p, r := f.ImportSignature()
	s := "(func"
	if len(p) > 0 {
		s += " (param " + FlatString(p) + ")"
	}
	if len(r) > 0 {
		s += " (result " + FlatString(r) + ")"
	}
	return s + ")"
}

// UsesMemory reports whether a call needs the guest's linear memory: a
// params pointer, a return pointer, or a string or list anywhere.
func (f *Func) UsesMemory() bool {
	if f.paramsByPointer() || f.resultByPointer() || f.tuple.hasPointers() {
		return true
	}
	return f.Result != nil && f.Result.hasPointers()
}

func (t *Type) hasPointers() bool {
	switch t.kind {
	case KString, KList:
		return true
	case KRecord:
		for _, f := range t.fields {
			if f.Type.hasPointers() {
				return true
			}
		}
	case KVariant, KOption, KResult:
		for _, c := range t.cases {
			if c.Type != nil && c.Type.hasPointers() {
				return true
			}
		}
	}
	return false
}

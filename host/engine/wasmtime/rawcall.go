//go:build wasmtime

package wasmtime

// The warm export call crosses into C once, and guest memory is found
// once per stretch of host code (wasmtime-go's UnsafeData and DataSize
// are two crossings each, on every access). wasmtime-go v25's Func.Call
// pays, on every call, a Func.Type (a cgo call, Params/Results copies and
// a finalized type object), boxing through []any, Store.Context lookups
// and a separate SetEpochDeadline: six cgo crossings and several
// allocations for a no-op. Here the export's type is read once, at
// lookup, and one C call sets the epoch deadline and runs
// wasmtime_func_call_unchecked on a reused buffer of raw values. The
// symbols ship in the libwasmtime.a wasmtime-go links (as epoch.go's do);
// the structs below mirror wasmtime.h v25 and are checked at New.

/*
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

typedef struct wasmtime_context wasmtime_context_t;
typedef struct wasmtime_error wasmtime_error_t;
typedef struct wasm_trap_t wasm_trap_t;

// wasm_byte_vec_t (wasm.h).
typedef struct { size_t size; char *data; } capsule_bytes_t;
// wasmtime_func_t (wasmtime/extern.h).
typedef struct { uint64_t store_id; size_t private_; } capsule_func_t;
// wasmtime_memory_t (wasmtime/extern.h).
typedef struct { uint64_t store_id; size_t private_; } capsule_memory_t;
// wasmtime_extern_t (wasmtime/extern.h): every member of its union is 16 bytes.
typedef struct { uint8_t kind; union { capsule_func_t func; capsule_memory_t memory; } of; } capsule_extern_t;
// wasmtime_val_raw_t (wasmtime/val.h): a 16-byte union whose scalars sit at
// offset 0, little-endian, i32 and f32 in the low 4 bytes.
typedef struct { uint64_t lo, hi; } capsule_raw_t;

extern wasmtime_error_t *wasmtime_func_call_unchecked(wasmtime_context_t *, const capsule_func_t *,
                                                      capsule_raw_t *, size_t, wasm_trap_t **);
extern void wasmtime_context_set_epoch_deadline(wasmtime_context_t *, uint64_t);
extern bool wasmtime_trap_code(const wasm_trap_t *, uint8_t *);
extern void wasm_trap_message(const wasm_trap_t *, capsule_bytes_t *);
extern void wasm_trap_delete(wasm_trap_t *);
extern void wasmtime_error_message(const wasmtime_error_t *, capsule_bytes_t *);
extern bool wasmtime_error_exit_status(const wasmtime_error_t *, int *);
extern void wasmtime_error_delete(wasmtime_error_t *);
extern void wasm_byte_vec_delete(capsule_bytes_t *);
extern uint8_t *wasmtime_memory_data(const wasmtime_context_t *, const capsule_memory_t *);
extern size_t wasmtime_memory_data_size(const wasmtime_context_t *, const capsule_memory_t *);

// capsule_outcome_t is a call's failure: at most one of the two is set.
typedef struct { wasmtime_error_t *err; wasm_trap_t *trap; } capsule_outcome_t;

// capsule_call is the whole warm call: with deadline set, the store's epoch
// deadline is renewed to the next tick first (an export call); without, it
// is left as is (cabi_realloc, which runs inside or between calls).
static capsule_outcome_t capsule_call(wasmtime_context_t *cx, const capsule_func_t *fn,
                                      capsule_raw_t *vals, size_t n, int deadline) {
	capsule_outcome_t o = {0, 0};
	if (deadline) {
		wasmtime_context_set_epoch_deadline(cx, 1);
	}
	o.err = wasmtime_func_call_unchecked(cx, fn, vals, n, &o.trap);
	return o;
}

// capsule_failure_t is what the host needs of a failed call, read in one
// crossing; msg is freed by the caller with wasm_byte_vec_delete, and its
// first len bytes are the message (a trap's has a trailing NUL).
typedef struct {
	bool has_code, has_exit;
	uint8_t code;
	int exit;
	capsule_bytes_t msg;
	size_t len;
} capsule_failure_t;

static void capsule_read_failure(capsule_outcome_t o, capsule_failure_t *f) {
	f->has_code = f->has_exit = false;
	f->msg.size = 0;
	f->msg.data = NULL;
	f->len = 0;
	if (o.err != NULL) {
		f->has_exit = wasmtime_error_exit_status(o.err, &f->exit);
		wasmtime_error_message(o.err, &f->msg);
		f->len = f->msg.size;
		wasmtime_error_delete(o.err);
	}
	if (o.trap != NULL) {
		if (o.err == NULL) {
			f->has_code = wasmtime_trap_code(o.trap, &f->code);
			wasm_trap_message(o.trap, &f->msg);
			f->len = f->msg.size > 0 ? f->msg.size - 1 : 0;
		}
		wasm_trap_delete(o.trap);
	}
}

// Host functions are defined unchecked too: wasmtime hands the raw values
// to capsule_host_cb, which passes them to Go in one C-to-Go crossing with
// the caller's context (the same pointer as the store's). env is a
// cgo.Handle of the *hostEntry, deleted by the finalizer when wasmtime
// drops the function (the linker and every store holding it are gone).
typedef struct wasmtime_linker wasmtime_linker_t;
typedef struct wasmtime_caller wasmtime_caller_t;
typedef struct wasm_functype_t wasm_functype_t;
typedef struct wasm_valtype_t wasm_valtype_t;
// wasm_valtype_vec_t (wasm.h).
typedef struct { size_t size; wasm_valtype_t **data; } capsule_valtypes_t;

extern wasm_valtype_t *wasm_valtype_new(uint8_t);
extern void wasm_valtype_vec_new_uninitialized(capsule_valtypes_t *, size_t);
extern wasm_functype_t *wasm_functype_new(capsule_valtypes_t *, capsule_valtypes_t *);
extern void wasm_functype_delete(wasm_functype_t *);
extern wasmtime_context_t *wasmtime_caller_context(wasmtime_caller_t *);
extern wasm_trap_t *wasmtime_trap_new(const char *, size_t);
extern wasmtime_error_t *wasmtime_linker_define_func_unchecked(
    wasmtime_linker_t *, const char *, size_t, const char *, size_t, const wasm_functype_t *,
    wasm_trap_t *(*)(void *, wasmtime_caller_t *, capsule_raw_t *, size_t), void *, void (*)(void *));

// Implemented in Go (hostcall_export.go).
extern void *capsuleHostCall(uintptr_t, void *, void *, size_t);
extern void capsuleHostFree(uintptr_t);

static wasm_trap_t *capsule_host_cb(void *env, wasmtime_caller_t *caller, capsule_raw_t *vals, size_t n) {
	return (wasm_trap_t *)capsuleHostCall((uintptr_t)env, wasmtime_caller_context(caller), vals, n);
}

static void capsule_host_free(void *env) { capsuleHostFree((uintptr_t)env); }

static capsule_valtypes_t capsule_valtypes(const uint8_t *kinds, size_t n) {
	capsule_valtypes_t v;
	wasm_valtype_vec_new_uninitialized(&v, n);
	for (size_t i = 0; i < n; i++) {
		v.data[i] = wasm_valtype_new(kinds[i]);
	}
	return v;
}

// capsule_define defines module.name in linker as an unchecked host
// function of the given wasm_valkind_t params and results.
static capsule_outcome_t capsule_define(void *linker, _GoString_ module, _GoString_ name,
                                        const uint8_t *params, size_t np, const uint8_t *results, size_t nr,
                                        uintptr_t env) {
	capsule_valtypes_t ps = capsule_valtypes(params, np), rs = capsule_valtypes(results, nr);
	wasm_functype_t *ty = wasm_functype_new(&ps, &rs);
	capsule_outcome_t o = {0, 0};
	o.err = wasmtime_linker_define_func_unchecked((wasmtime_linker_t *)linker,
	    _GoStringPtr(module), _GoStringLen(module), _GoStringPtr(name), _GoStringLen(name),
	    ty, capsule_host_cb, (void *)env, capsule_host_free);
	wasm_functype_delete(ty);
	return o;
}

static wasm_trap_t *capsule_trap(_GoString_ msg) { return wasmtime_trap_new(_GoStringPtr(msg), _GoStringLen(msg)); }

static capsule_func_t capsule_extern_func(const capsule_extern_t *e) { return e->of.func; }
static capsule_memory_t capsule_extern_memory(const capsule_extern_t *e) { return e->of.memory; }

// capsule_span_t is a memory's current bytes, read in one crossing.
typedef struct { uint8_t *data; size_t size; } capsule_span_t;

static capsule_span_t capsule_memory(const wasmtime_context_t *cx, const capsule_memory_t *m) {
	capsule_span_t s = {wasmtime_memory_data(cx, m), wasmtime_memory_data_size(cx, m)};
	return s;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"github.com/bytecodealliance/wasmtime-go/v25"

	"github.com/capsule-host/capsule-host/host/engine"
)

// externLayoutOK checks, once, that the wasmtime_extern_t Func.AsExtern
// returns is the 24-byte C struct the raw call reads a wasmtime_func_t
// from; New refuses to start otherwise.
var externLayoutOK = func() bool {
	t := reflect.TypeOf((*wasmtime.Func).AsExtern).Out(0)
	kind, okK := t.FieldByName("kind")
	of, okO := t.FieldByName("of")
	return t.Kind() == reflect.Struct && t.Size() == C.sizeof_capsule_extern_t &&
		okK && kind.Offset == 0 && kind.Type.Size() == 1 &&
		okO && of.Offset == C.sizeof_capsule_extern_t-C.sizeof_capsule_func_t && of.Type.Size() == C.sizeof_capsule_func_t
}()

// export is a guest function ready for the raw call: its wasmtime_func_t
// and its core type, read once at lookup.
type export struct {
	raw             C.capsule_func_t
	params, results []engine.ValueType
}

// newExport reads fn's type and handle. Only numeric types are callable
// unchecked: a reference or v128 parameter or result would hand wasmtime
// an unvalidated raw value, so such an export is refused.
func newExport(s wasmtime.Storelike, fn *wasmtime.Func) (*export, error) {
	ty := fn.Type(s)
	defer ty.Close()
	ex := &export{}
	var err error
	if ex.params, err = numericKinds(ty.Params()); err != nil {
		return nil, fmt.Errorf("parameter: %w", err)
	}
	if ex.results, err = numericKinds(ty.Results()); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	ext := fn.AsExtern()
	ex.raw = C.capsule_extern_func((*C.capsule_extern_t)(unsafe.Pointer(&ext)))
	return ex, nil
}

func numericKinds(vs []*wasmtime.ValType) ([]engine.ValueType, error) {
	out := fromKinds(vs)
	for i, v := range out {
		if v == 0 {
			return nil, fmt.Errorf("type %s is not supported (only i32, i64, f32, f64)", kindName(vs[i].Kind()))
		}
	}
	return out, nil
}

// kindName names a non-numeric kind; wasmtime-go's ValKind.String
// panics on v128, which wasmtime's C API reports as kind 4.
func kindName(k wasmtime.ValKind) string {
	switch k {
	case wasmtime.KindExternref, wasmtime.KindFuncref:
		return k.String()
	case 4:
		return "v128"
	}
	return fmt.Sprintf("valkind(%d)", k)
}

// call runs ex with params on this instance's store in one cgo crossing;
// vals is the raw buffer to use (at least max(params, results) long).
func (in *instance) call(ex *export, vals []C.capsule_raw_t, deadline bool, params []uint64) C.capsule_outcome_t {
	for i, p := range params {
		vals[i] = C.capsule_raw_t{lo: C.uint64_t(p)}
	}
	d := C.int(0)
	if deadline {
		d = 1
	}
	o := C.capsule_call((*C.wasmtime_context_t)(in.key), &ex.raw, &vals[0], C.size_t(len(vals)), d)
	in.raw.guestRan()
	return o
}

// failed reports whether o is a failure.
func failed(o C.capsule_outcome_t) bool { return o.err != nil || o.trap != nil }

// result is the seam's encoding of raw value v of type t: i32 and f32 in
// the low 32 bits, zero above.
func result(t engine.ValueType, v C.capsule_raw_t) uint64 {
	x := uint64(v.lo)
	if t == engine.I32 || t == engine.F32 {
		x &= math32
	}
	return x
}

const math32 = 1<<32 - 1

// readFailure turns a raw failure into a failure, freeing the C objects.
func readFailure(o C.capsule_outcome_t) failure {
	var cf C.capsule_failure_t
	C.capsule_read_failure(o, &cf)
	f := failure{hasCode: bool(cf.has_code), code: wasmtime.TrapCode(cf.code), hasExit: bool(cf.has_exit), exit: int32(cf.exit)}
	if cf.msg.data != nil {
		f.msg = C.GoStringN(cf.msg.data, C.int(cf.len))
		C.wasm_byte_vec_delete(&cf.msg)
	}
	return f
}

// rawBufs are an instance's reused raw value buffers, one for export
// calls and one for cabi_realloc (which may run inside an export call),
// and its memory: the wasmtime_memory_t and, while no guest code has run
// since it was read, its bytes.
type rawBufs struct {
	vals    []C.capsule_raw_t
	realloc [4]C.capsule_raw_t
	mem     C.capsule_memory_t
	span    []byte // valid while spanOK
	spanOK  bool
	stacks  [][]uint64 // host function stacks, by nesting depth
	depth   int
}

// guestRan forgets the memory's bytes: the guest may have grown, and so
// moved, them. Only guest code grows this memory (it is not shared, WASI
// does not grow it, threads are off), so it is called wherever guest code
// may have run: after every raw call and on entry to every host function.
func (b *rawBufs) guestRan() {
	b.span, b.spanOK = nil, false
}

// setMemory makes mem the memory memData reads.
func (b *rawBufs) setMemory(mem *wasmtime.Memory) {
	ext := mem.AsExtern()
	b.mem = C.capsule_extern_memory((*C.capsule_extern_t)(unsafe.Pointer(&ext)))
}

// memData is the instance memory's current bytes (set by setMemory),
// read once until the guest next runs (guestRan).
func (in *instance) memData() []byte {
	if !in.raw.spanOK {
		s := C.capsule_memory((*C.wasmtime_context_t)(in.key), &in.raw.mem)
		in.raw.span, in.raw.spanOK = unsafe.Slice((*byte)(unsafe.Pointer(s.data)), int(s.size)), true
	}
	return in.raw.span
}

// buf is the export-call buffer, at least n long.
func (b *rawBufs) buf(n int) []C.capsule_raw_t {
	if len(b.vals) < n {
		b.vals = make([]C.capsule_raw_t, n)
	}
	return b.vals[:n]
}

// linkerLayoutOK checks, once, that wasmtime.Linker still starts with its
// raw C pointer, which define passes to wasmtime; New refuses otherwise.
var linkerLayoutOK = startsWithPtr(reflect.TypeOf(wasmtime.Linker{}))

// hostEntry is one host function as wasmtime calls it (capsuleHostCall).
type hostEntry struct {
	e               *eng
	fn              func(context.Context, engine.Caller, []uint64)
	params, results []engine.ValueType
}

// hostEntries maps the env wasmtime passes back to its *hostEntry. Not
// cgo.Handle: wasmtime's finalizer deletes the entry, and a Handle
// deleted twice (or never made, when define fails early) would panic on
// a C stack.
var (
	hostEntries sync.Map // uintptr → *hostEntry
	hostIDs     atomic.Uintptr
)

// define links f into e's linker as an unchecked host function: wasmtime
// passes raw values and capsuleHostCall runs f.Fn on them directly, with
// none of wasmtime-go's per-call []Val, Caller and store-data lookups.
func (e *eng) define(f engine.HostFunc) error {
	ps, err := wasmKinds(f.Params)
	if err != nil {
		return err
	}
	rs, err := wasmKinds(f.Results)
	if err != nil {
		return err
	}
	if !utf8.ValidString(f.Module) || !utf8.ValidString(f.Name) {
		return errors.New("module and name must be UTF-8")
	}
	id := hostIDs.Add(1)
	hostEntries.Store(id, &hostEntry{e: e, fn: f.Fn, params: f.Params, results: f.Results})
	linker := *(*unsafe.Pointer)(unsafe.Pointer(e.linker))
	// From here wasmtime owns id: it runs the finalizer on failure too.
	o := C.capsule_define(linker, f.Module, f.Name, kindsPtr(ps), C.size_t(len(ps)), kindsPtr(rs), C.size_t(len(rs)), C.uintptr_t(id))
	runtime.KeepAlive(e.linker)
	if failed(o) {
		return errors.New(readFailure(o).msg)
	}
	return nil
}

func kindsPtr(k []C.uint8_t) *C.uint8_t {
	if len(k) == 0 {
		return nil
	}
	return &k[0]
}

// wasmKinds maps the seam's value types to wasm_valkind_t.
func wasmKinds(vs []engine.ValueType) ([]C.uint8_t, error) {
	out := make([]C.uint8_t, len(vs))
	for i, v := range vs {
		switch v {
		case engine.I32:
			out[i] = C.uint8_t(wasmtime.KindI32)
		case engine.I64:
			out[i] = C.uint8_t(wasmtime.KindI64)
		case engine.F32:
			out[i] = C.uint8_t(wasmtime.KindF32)
		case engine.F64:
			out[i] = C.uint8_t(wasmtime.KindF64)
		default:
			return nil, fmt.Errorf("unsupported value type %v", v)
		}
	}
	return out, nil
}

// hostCall runs one call of host function id from the guest of the store
// whose context is cx; vals holds its params and receives its results. A
// panic here would cross wasmtime's C frames, so nothing here panics:
// runHost recovers the body's, and a body's *Trap is kept on the instance
// while the guest is unwound with a wasmtime trap, so Call returns the
// original *Trap.
func hostCall(id uintptr, cx, vals unsafe.Pointer, n int) unsafe.Pointer {
	v, ok := hostEntries.Load(id)
	if !ok {
		return newTrap("capsule-host: unknown host function")
	}
	he := v.(*hostEntry)
	iv, ok := he.e.stores.Load(cx)
	if !ok {
		return newTrap("host function called from an unknown store")
	}
	in := iv.(*instance)
	if n < max(len(he.params), len(he.results)) {
		return newTrap("capsule-host: host function called with too few values")
	}
	in.raw.guestRan()
	raw := unsafe.Slice((*C.capsule_raw_t)(vals), n)
	stack := in.raw.hostStack(n)
	for i, t := range he.params {
		stack[i] = result(t, raw[i])
	}
	t := in.runHost(he.fn, stack)
	in.raw.depth--
	if t != nil {
		if in.hostTrap == nil {
			in.hostTrap = t
		}
		return newTrap(t.Reason)
	}
	// wazero closes the module the moment the call's ctx ends, so a
	// guest never runs on after a host function that returned because
	// of it (e.g. a wait cut short by the deadline). Match that here
	// rather than waiting for the next epoch tick.
	if in.ctx != nil && in.ctx.Err() != nil {
		in.interrupted = true
		return newTrap("capsule-host: call interrupted")
	}
	for i := range he.results {
		raw[i] = C.capsule_raw_t{lo: C.uint64_t(stack[i])}
	}
	return nil
}

func newTrap(msg string) unsafe.Pointer { return unsafe.Pointer(C.capsule_trap(msg)) }

// hostStack is a zeroed stack of n values for a host function at the
// current nesting depth (a host function may call cabi_realloc, whose
// guest code may call host functions), reused across calls; the caller
// decrements depth when the function returns.
func (b *rawBufs) hostStack(n int) []uint64 {
	if b.depth == len(b.stacks) {
		b.stacks = append(b.stacks, nil)
	}
	s := b.stacks[b.depth]
	if cap(s) < n {
		s = make([]uint64, max(n, 8))
		b.stacks[b.depth] = s
	}
	b.depth++
	s = s[:n]
	clear(s)
	return s
}

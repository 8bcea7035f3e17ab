//go:build wasmtime

package wasmtime

// The epoch-deadline callback is not wrapped by wasmtime-go v25, but its C
// symbol ships in the same libwasmtime.a the wasmtime-go package links, so
// declaring the prototype here is enough. Why a callback and not a bare
// epoch deadline: the epoch is engine-wide, so "interrupt this one store
// now" (a cancelled call) cannot be expressed with deadlines alone; the
// callback lets each store ask its own ctx on every tick and either trap
// or extend by one tick.

/*
#include <stdint.h>
#include <stdlib.h>

typedef struct wasmtime_store wasmtime_store_t;
typedef struct wasmtime_context wasmtime_context_t;
typedef struct wasmtime_error wasmtime_error_t;
typedef uint8_t wasmtime_update_deadline_kind_t;

extern wasmtime_error_t *wasmtime_error_new(const char *);
extern void wasmtime_store_epoch_deadline_callback(
    wasmtime_store_t *store,
    wasmtime_error_t *(*func)(wasmtime_context_t *, void *, uint64_t *, wasmtime_update_deadline_kind_t *),
    void *data, void (*finalizer)(void *));

// Implemented in Go (epoch_export.go).
extern int capsuleEpochExpired(uintptr_t handle);

static wasmtime_error_t *capsule_epoch_cb(wasmtime_context_t *ctx, void *data,
                                          uint64_t *delta, wasmtime_update_deadline_kind_t *kind) {
	(void)ctx;
	if (capsuleEpochExpired((uintptr_t)data)) {
		return wasmtime_error_new("capsule-host: call interrupted");
	}
	*delta = 1;
	*kind = 0; // WASMTIME_UPDATE_DEADLINE_CONTINUE
	return NULL;
}

static void capsule_set_epoch_callback(void *store, uintptr_t handle) {
	wasmtime_store_epoch_deadline_callback((wasmtime_store_t *)store, capsule_epoch_cb, (void *)handle, NULL);
}
*/
import "C"

import (
	"reflect"
	"runtime/cgo"
	"unsafe"

	"github.com/bytecodealliance/wasmtime-go/v25"
)

// storeLayoutOK checks, once, that wasmtime.Store still starts with its
// raw C pointer: the only field this package reads behind wasmtime-go's
// back. A version bump that moves it fails New with a clear error instead
// of corrupting memory.
var storeLayoutOK = startsWithPtr(reflect.TypeOf(wasmtime.Store{}))

// startsWithPtr reports whether struct type t's first field is its raw C
// pointer, wasmtime-go's "_ptr".
func startsWithPtr(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t.NumField() > 0 && t.Field(0).Name == "_ptr" &&
		t.Field(0).Offset == 0 && t.Field(0).Type.Kind() == reflect.Pointer
}

// setEpochCallback installs the per-store callback; h resolves to the
// *instance whose ctx decides.
func setEpochCallback(s *wasmtime.Store, h cgo.Handle) {
	raw := *(*unsafe.Pointer)(unsafe.Pointer(s))
	C.capsule_set_epoch_callback(raw, C.uintptr_t(h))
}

//go:build wasmtime

package wasmtime

// #include <stdint.h>
// #include <stddef.h>
import "C"

import "unsafe"

// capsuleHostCall is every host function's entry from wasmtime
// (capsule_host_cb in rawcall.go): a trap pointer, or nil.
//
//export capsuleHostCall
func capsuleHostCall(id C.uintptr_t, cx, vals unsafe.Pointer, n C.size_t) unsafe.Pointer {
	return hostCall(uintptr(id), cx, vals, int(n))
}

// capsuleHostFree is wasmtime's finalizer of a host function's env.
//
//export capsuleHostFree
func capsuleHostFree(id C.uintptr_t) { hostEntries.Delete(uintptr(id)) }

//go:build wasmtime

package wasmtime

// #include <stdint.h>
import "C"

import "runtime/cgo"

// capsuleEpochExpired runs on every epoch tick while a store executes
// wasm: 1 interrupts the call (its ctx is done), 0 extends by one tick.
//
//export capsuleEpochExpired
func capsuleEpochExpired(h C.uintptr_t) C.int {
	in, ok := cgo.Handle(h).Value().(*instance)
	if !ok || in.ctx == nil {
		return 0
	}
	if in.ctx.Err() != nil {
		in.interrupted = true
		return 1
	}
	return 0
}

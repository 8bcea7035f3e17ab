//go:build wasip1

// Package tool exports the capsule:guest/tool@1.0.0 interface for the
// end-to-end guests (hand-written, like package proc: wit-bindgen-go's
// export glue needs a 32-bit Go).
package tool

import (
	"strings"
	"unsafe"

	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/rt"
)

// Spec is a tool-spec.
type Spec struct{ Name, Description, InputSchema string }

// Handlers set by the program.
var (
	Describe func() []Spec
	Call     func(name, input string) (out string, ok bool)
)

// Result areas and the strings they point to live in globals until the
// next export call (or cabi_post) so the host can read them after return.
var (
	describeArea [2]uint32 // list<tool-spec>: ptr, len
	describeRecs []uint32  // 6 words per tool-spec
	callArea     [3]uint32 // result<string, string>: disc (u8 @0), ptr, len
	keep         []string  // strings the areas point to
)

func addr(p unsafe.Pointer) uint32 { return uint32(uintptr(p)) }

func str(s string) (uint32, uint32) {
	if s == "" {
		return 1, 0
	}
	keep = append(keep, s)
	return addr(unsafe.Pointer(unsafe.StringData(s))), uint32(len(s))
}

//go:wasmexport capsule:guest/tool@1.0.0#describe
func describe() uint32 {
	rt.Reset()
	keep = nil
	specs := Describe()
	describeRecs = make([]uint32, 6*len(specs)+1)
	for i, s := range specs {
		describeRecs[6*i], describeRecs[6*i+1] = str(s.Name)
		describeRecs[6*i+2], describeRecs[6*i+3] = str(s.Description)
		describeRecs[6*i+4], describeRecs[6*i+5] = str(s.InputSchema)
	}
	describeArea = [2]uint32{addr(unsafe.Pointer(&describeRecs[0])), uint32(len(specs))}
	return addr(unsafe.Pointer(&describeArea))
}

//go:wasmexport capsule:guest/tool@1.0.0#call
func call(np uint32, nl uint32, ip uint32, il uint32) uint32 {
	// Copy the arguments out of the blocks the host allocated through
	// cabi_realloc before rt.Reset lets them go.
	name := strings.Clone(unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(np))), nl))
	input := strings.Clone(unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(ip))), il))
	keep = nil
	out, ok := Call(name, input)
	callArea[0] = 0
	if !ok {
		callArea[0] = 1
	}
	callArea[1], callArea[2] = str(out)
	return addr(unsafe.Pointer(&callArea))
}

// postCall is the optional post-return of call: the host has copied the
// result, so its strings may go.
//
//go:wasmexport cabi_post_capsule:guest/tool@1.0.0#call
func postCall(uint32) { keep = nil }

package sdk

import (
	"fmt"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
)

// The lowering of the capsule:guest/tool@1.0.0 exports, kept free of
// wasm-only code so it is unit-tested on the host (export_wasm.go has the
// //go:wasmexport wrappers).

var (
	lToolSpec    = abi.Record(abi.String, abi.String, abi.String)
	lDescribeRet = abi.List()
	lCallRet     = abi.Result(&abi.String, &abi.String)
)

// out holds the memory of the last export result until its cabi_post_*
// hook (or, if a host skips it, the next export call).
var out = &abi.Scope{}

// describeExport lowers list<tool-spec> and returns the pointer to the
// (ptr, len) pair.
func describeExport() uint32 {
	out.Free()
	lp, lm := out.Alloc(uint32(len(tools))*lToolSpec.Size, lToolSpec.Align)
	for i, t := range tools {
		off := uint32(i) * lToolSpec.Size
		out.PutStr(lm, off+lToolSpec.Offs[0], t.Name)
		out.PutStr(lm, off+lToolSpec.Offs[1], t.Description)
		out.PutStr(lm, off+lToolSpec.Offs[2], t.InputSchema)
	}
	rp, rm := out.Ret(lDescribeRet)
	abi.PutU32(rm, 0, lp)
	abi.PutU32(rm, 4, uint32(len(tools)))
	return rp
}

// callExport lifts (name, input) from what the host placed with
// cabi_realloc, runs the tool and lowers result<string, string>.
func callExport(nameP, nameL, inP, inL uint32) uint32 {
	out.Free()
	l := abi.Lifter{M: abi.Incoming}
	var pair [16]byte
	abi.PutU32(pair[:], 0, nameP)
	abi.PutU32(pair[:], 4, nameL)
	abi.PutU32(pair[:], 8, inP)
	abi.PutU32(pair[:], 12, inL)
	name := l.String(pair[:], 0, "call: name")
	input := l.String(pair[:], 8, "call: input")
	abi.Incoming.Free()
	if l.Err != nil {
		// The host broke the ABI (the Canonical ABI traps here too).
		panic(fmt.Sprintf("capsule:guest/tool@1.0.0#call: %v", l.Err))
	}
	ok, msg, isErr := Call(name, input)
	rp, rm := out.Ret(lCallRet)
	if isErr {
		abi.PutU8(rm, 0, 1)
		out.PutStr(rm, lCallRet.Payload, msg)
	} else {
		out.PutStr(rm, lCallRet.Payload, ok)
	}
	return rp
}

// postReturn frees the last export result.
func postReturn(uint32) { out.Free() }

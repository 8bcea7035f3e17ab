//go:build wasip1

package sdk

//go:wasmexport capsule:guest/tool@1.0.0#describe
func wasmDescribe() uint32 { return describeExport() }

//go:wasmexport capsule:guest/tool@1.0.0#call
func wasmCall(nameP, nameL, inP, inL uint32) uint32 { return callExport(nameP, nameL, inP, inL) }

//go:wasmexport cabi_post_capsule:guest/tool@1.0.0#describe
func wasmPostDescribe(p uint32) { postReturn(p) }

//go:wasmexport cabi_post_capsule:guest/tool@1.0.0#call
func wasmPostCall(p uint32) { postReturn(p) }

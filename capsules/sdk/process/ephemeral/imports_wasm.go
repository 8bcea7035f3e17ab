//go:build wasip1

package ephemeral

// Core signatures of capsule:process/host@1.0.0 (see package process for
// the flattening notes; the shapes are the same, the module differs).

//go:wasmimport capsule:process/host@1.0.0 spawn
func impSpawn(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 spawn-background
func impSpawnBackground(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [method]process-handle.read-logs
func impHReadLogs(self, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [method]process-handle.write-stdin
func impHWriteStdin(self, dataP, dataL, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [method]process-handle.close-stdin
func impHCloseStdin(self, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [method]process-handle.signal
func impHSignal(self, sig, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [method]process-handle.kill
func impHKill(self, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [method]process-handle.wait
func impHWait(self, timeoutD uint32, timeoutMS uint64, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [method]process-handle.wait-with-output
func impHWaitWithOutput(self, timeoutD uint32, timeoutMS uint64, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [method]process-handle.os-pid
func impHOSPid(self, ret uint32)

//go:wasmimport capsule:process/host@1.0.0 [resource-drop]process-handle
func impHDrop(self uint32)

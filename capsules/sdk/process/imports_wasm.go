//go:build wasip1

package process

// Core signatures of capsule:process/host@1.1.0, flattened per the
// Canonical ABI (i32 -> uint32, i64 -> uint64). Every function returns a
// result<...> that flattens to more than one value, so each takes a
// return pointer as its last param and returns nothing. spawn-persistent
// has 35 flat params (> 16): they are passed as one pointer to a tuple.

//go:wasmimport capsule:process/host@1.1.0 spawn
func impSpawn(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 spawn-background
func impSpawnBackground(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 spawn-persistent
func impSpawnPersistent(params, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 attach
func impAttach(idP, idL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 list-processes
func impListProcesses(filterD, filterP, filterL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 status
func impStatus(idP, idL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 status-many
func impStatusMany(idsP, idsL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 read-since
func impReadSince(idP, idL, stream, curD, curP, curL, maxBytes, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 read-logs
func impReadLogs(idP, idL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 write-stdin
func impWriteStdin(idP, idL, dataP, dataL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 close-stdin
func impCloseStdin(idP, idL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 signal
func impSignal(idP, idL, sig, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 wait
func impWait(idP, idL uint32, timeoutMS uint64, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 stop
func impStop(idP, idL, graceD uint32, grace uint64, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 release
func impRelease(idP, idL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 poll-events
func impPollEvents(cursor uint64, max uint32, timeoutMS uint64, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [method]process-handle.read-logs
func impHReadLogs(self, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [method]process-handle.write-stdin
func impHWriteStdin(self, dataP, dataL, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [method]process-handle.close-stdin
func impHCloseStdin(self, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [method]process-handle.signal
func impHSignal(self, sig, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [method]process-handle.kill
func impHKill(self, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [method]process-handle.wait
func impHWait(self, timeoutD uint32, timeoutMS uint64, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [method]process-handle.wait-with-output
func impHWaitWithOutput(self, timeoutD uint32, timeoutMS uint64, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [method]process-handle.os-pid
func impHOSPid(self, ret uint32)

//go:wasmimport capsule:process/host@1.1.0 [resource-drop]process-handle
func impHDrop(self uint32)

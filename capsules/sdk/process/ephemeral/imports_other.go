//go:build !wasip1

package ephemeral

// Off wasm the imports are variables, so host-side unit tests can play the
// host; by default they panic, since there is no host to call.

func noHost() { panic("capsule:process/host@1.0.0 exists only in a wasip1 guest") }

// impSpawn is the import spawn.
var impSpawn = func(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32) {
	noHost()
}

// impSpawnBackground is the import spawn-background.
var impSpawnBackground = func(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32) {
	noHost()
}

// impHReadLogs is the import [method]process-handle.read-logs.
var impHReadLogs = func(self, ret uint32) { noHost() }

// impHWriteStdin is the import [method]process-handle.write-stdin.
var impHWriteStdin = func(self, dataP, dataL, ret uint32) { noHost() }

// impHCloseStdin is the import [method]process-handle.close-stdin.
var impHCloseStdin = func(self, ret uint32) { noHost() }

// impHSignal is the import [method]process-handle.signal.
var impHSignal = func(self, sig, ret uint32) { noHost() }

// impHKill is the import [method]process-handle.kill.
var impHKill = func(self, ret uint32) { noHost() }

// impHWait is the import [method]process-handle.wait.
var impHWait = func(self, timeoutD uint32, timeoutMS uint64, ret uint32) { noHost() }

// impHWaitWithOutput is the import [method]process-handle.wait-with-output.
var impHWaitWithOutput = func(self, timeoutD uint32, timeoutMS uint64, ret uint32) { noHost() }

// impHOSPid is the import [method]process-handle.os-pid.
var impHOSPid = func(self, ret uint32) { noHost() }

// impHDrop is the import [resource-drop]process-handle.
var impHDrop = func(self uint32) { noHost() }

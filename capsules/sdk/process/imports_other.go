//go:build !wasip1

package process

// Off wasm the imports are variables, so host-side unit tests can play the
// host; by default they panic, since there is no host to call.

func noHost() { panic("capsule:process/host@1.1.0 exists only in a wasip1 guest") }

// impSpawn is the import spawn.
var impSpawn = func(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32) {
	noHost()
}

// impSpawnBackground is the import spawn-background.
var impSpawnBackground = func(cmdP, cmdL, argsP, argsL, stdinD, stdinP, stdinL, envP, envL, cwdD, cwdP, cwdL, toD uint32, to uint64, ret uint32) {
	noHost()
}

// impSpawnPersistent is the import spawn-persistent.
var impSpawnPersistent = func(params, ret uint32) { noHost() }

// impAttach is the import attach.
var impAttach = func(idP, idL, ret uint32) { noHost() }

// impListProcesses is the import list-processes.
var impListProcesses = func(filterD, filterP, filterL, ret uint32) { noHost() }

// impStatus is the import status.
var impStatus = func(idP, idL, ret uint32) { noHost() }

// impStatusMany is the import status-many.
var impStatusMany = func(idsP, idsL, ret uint32) { noHost() }

// impReadSince is the import read-since.
var impReadSince = func(idP, idL, stream, curD, curP, curL, maxBytes, ret uint32) { noHost() }

// impReadLogs is the import read-logs.
var impReadLogs = func(idP, idL, ret uint32) { noHost() }

// impWriteStdin is the import write-stdin.
var impWriteStdin = func(idP, idL, dataP, dataL, ret uint32) { noHost() }

// impCloseStdin is the import close-stdin.
var impCloseStdin = func(idP, idL, ret uint32) { noHost() }

// impSignal is the import signal.
var impSignal = func(idP, idL, sig, ret uint32) { noHost() }

// impWait is the import wait.
var impWait = func(idP, idL uint32, timeoutMS uint64, ret uint32) { noHost() }

// impStop is the import stop.
var impStop = func(idP, idL, graceD uint32, grace uint64, ret uint32) { noHost() }

// impRelease is the import release.
var impRelease = func(idP, idL, ret uint32) { noHost() }

// impPollEvents is the import poll-events.
var impPollEvents = func(cursor uint64, max uint32, timeoutMS uint64, ret uint32) { noHost() }

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

//go:build wasip1

package terminal

// Core signatures of the capsule:process/host@1.2.0 functions this package
// calls (flattened per the Canonical ABI; every result goes through a
// return pointer). spawn-persistent's 41 flat params are one pointer.

//go:wasmimport capsule:process/host@1.2.0 spawn-persistent
func impSpawnPersistent(params, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 status
func impStatus(idP, idL, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 status-many
func impStatusMany(idsP, idsL, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 list-processes
func impListProcesses(filterD, filterP, filterL, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 send-keys
func impSendKeys(idP, idL, keysP, keysL, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 paste
func impPaste(idP, idL, textP, textL, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 submit
func impSubmit(idP, idL, textP, textL, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 resize
func impResize(idP, idL, rows, cols, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 snapshot
func impSnapshot(idP, idL, scrollback, ret uint32)

//go:wasmimport capsule:process/host@1.2.0 wait-for
func impWaitFor(idP, idL, condD uint32, c1 uint64, c2, c3, c4, c5, c6 uint32, timeoutMS uint64, ret uint32)

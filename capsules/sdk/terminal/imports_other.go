//go:build !wasip1

package terminal

// Off wasm the imports are variables, so host-side unit tests can play the
// host; by default they panic, since there is no host to call.

func noHost() { panic("capsule:process/host@1.2.0 exists only in a wasip1 guest") }

var (
	impSpawnPersistent = func(params, ret uint32) { noHost() }
	impStatus          = func(idP, idL, ret uint32) { noHost() }
	impStatusMany      = func(idsP, idsL, ret uint32) { noHost() }
	impListProcesses   = func(filterD, filterP, filterL, ret uint32) { noHost() }
	impSendKeys        = func(idP, idL, keysP, keysL, ret uint32) { noHost() }
	impPaste           = func(idP, idL, textP, textL, ret uint32) { noHost() }
	impSubmit          = func(idP, idL, textP, textL, ret uint32) { noHost() }
	impResize          = func(idP, idL, rows, cols, ret uint32) { noHost() }
	impSnapshot        = func(idP, idL, scrollback, ret uint32) { noHost() }
	impWaitFor         = func(idP, idL, condD uint32, c1 uint64, c2, c3, c4, c5, c6 uint32, timeoutMS uint64, ret uint32) {
		noHost()
	}
)

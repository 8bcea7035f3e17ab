package process

import (
	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
)

// The host functions. Each doc comment gives the WIT function and its core
// type (flatten_functype 'lower'; "retptr" is the trailing i32 return
// pointer of a result that flattens to more than one value). The core
// types of a function are the same in every version that has it:
// error-code, process-signal, process-info and persist-options only differ
// inside the return area or behind the params pointer, and in the range of
// the signal enum.

var (
	ver10 = &version{module: Module10, rt: "process-handle (" + Module10 + ")", errorCode: tErrorCode10, signal: tSignal10}
	ver11 = &version{module: Module11, rt: "process-handle (" + Module11 + ")", errorCode: tErrorCode11, signal: tSignal11, v11: true,
		info: tProcessInfo, options: tPersistOptions}
	ver12 = &version{module: Module12, rt: "process-handle (" + Module12 + ")", errorCode: tErrorCode11, signal: tSignal11, v11: true, v12: true,
		info: tProcessInfo12, options: tPersistOptions12}
)

func init() {
	ver10.funcs = ephemeralDefs(ver10)
	ver11.funcs = append(ephemeralDefs(ver11), persistentDefs(ver11)...)
	ver12.funcs = append(append(ephemeralDefs(ver12), persistentDefs(ver12)...), terminalDefs(ver12)...)
}

// res is result<T, error-code> of the version.
func res(v *version, ok *cabi.Type) *cabi.Type { return cabi.Result(ok, v.errorCode) }

func self() cabi.Field { return cabi.F("self", tBorrowHandle) }

// ephemeralDefs are the functions of 1.0.0, also part of 1.1.0.
func ephemeralDefs(v *version) []def {
	m := func(name string) string { return "[method]process-handle." + name }
	return []def{
		{cabi.NewFunc(m("read-logs"), res(v, tReadLogsResult), self()), true, handleReadLogs},
		{cabi.NewFunc(m("write-stdin"), res(v, cabi.U32), self(), cabi.F("data", cabi.List(cabi.U8))), true, handleWriteStdin},
		{cabi.NewFunc(m("close-stdin"), res(v, nil), self()), true, handleCloseStdin},
		{cabi.NewFunc(m("signal"), res(v, nil), self(), cabi.F("sig", v.signal)), true, handleSignal},
		{cabi.NewFunc(m("kill"), res(v, tExitInfo), self()), true, handleKill},
		{cabi.NewFunc(m("wait"), res(v, tExitInfo), self(), cabi.F("timeout-ms", cabi.Option(cabi.U64))), true, handleWait},
		{cabi.NewFunc(m("wait-with-output"), res(v, tProcessResult), self(), cabi.F("timeout-ms", cabi.Option(cabi.U64))), true, handleWaitWithOutput},
		{cabi.NewFunc(m("os-pid"), res(v, cabi.U32), self()), true, handleOSPid},
		{cabi.NewFunc("[resource-drop]process-handle", nil, cabi.F("self", tOwnHandle)), true, handleDrop},
		{cabi.NewFunc("spawn", res(v, tProcessResult), cabi.F("request", tSpawnRequest)), false, spawn},
		{cabi.NewFunc("spawn-background", res(v, tOwnHandle), cabi.F("request", tSpawnRequest)), true, spawnBackground},
	}
}

// persistentDefs are the functions 1.1.0 adds, also part of 1.2.0.
func persistentDefs(v *version) []def {
	id := cabi.F("id", tProcessID)
	return []def{
		{cabi.NewFunc("spawn-persistent", res(v, tProcessID), cabi.F("request", tSpawnRequest), cabi.F("options", v.options)), false, spawnPersistent},
		{cabi.NewFunc("attach", res(v, tOwnHandle), id), true, attach},
		{cabi.NewFunc("list-processes", res(v, cabi.List(v.info)), cabi.F("label-filter", cabi.Option(cabi.String))), false, listProcesses},
		{cabi.NewFunc("status", res(v, v.info), id), false, status},
		{cabi.NewFunc("status-many", res(v, cabi.List(v.info)), cabi.F("ids", cabi.List(tProcessID))), false, statusMany},
		{cabi.NewFunc("read-since", res(v, tLogChunk), id, cabi.F("which-stream", tLogStream), cabi.F("cursor", cabi.Option(cabi.String)), cabi.F("max-bytes", cabi.U32)), false, readSince},
		{cabi.NewFunc("read-logs", res(v, tReadLogsResult), id), false, readLogs},
		{cabi.NewFunc("write-stdin", res(v, cabi.U32), id, cabi.F("data", cabi.List(cabi.U8))), false, writeStdin},
		{cabi.NewFunc("close-stdin", res(v, nil), id), false, closeStdin},
		{cabi.NewFunc("signal", res(v, nil), id, cabi.F("sig", v.signal)), false, signal},
		{cabi.NewFunc("wait", res(v, tExitInfo), id, cabi.F("timeout-ms", cabi.U64)), false, wait},
		{cabi.NewFunc("stop", res(v, tExitInfo), id, cabi.F("grace-ms", cabi.Option(cabi.U64))), false, stop},
		{cabi.NewFunc("release", res(v, nil), id), false, release},
		{cabi.NewFunc("poll-events", res(v, tEventBatch), cabi.F("cursor", cabi.U64), cabi.F("max", cabi.U32), cabi.F("timeout-ms", cabi.U64)), false, pollEvents},
	}
}

// --- process-handle methods (both versions) ---

// handleReadLogs serves
//
//	[method]process-handle.read-logs: func() -> result<read-logs-result, error-code>
//	core: (func (param i32 self) (param i32 retptr))
func handleReadLogs(c *call, a []cabi.Value) cabi.Value {
	l, err := c.handle(a[0]).ReadLogs(c.ctx)
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(readLogsResult(l))
}

// handleWriteStdin serves
//
//	[method]process-handle.write-stdin: func(data: list<u8>) -> result<u32, error-code>
//	core: (func (param i32 self) (param i32 i32 data) (param i32 retptr))
func handleWriteStdin(c *call, a []cabi.Value) cabi.Value {
	n, err := c.handle(a[0]).WriteStdin(c.ctx, a[1].([]byte))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(uint32(n))
}

// handleCloseStdin serves
//
//	[method]process-handle.close-stdin: func() -> result<_, error-code>
//	core: (func (param i32 self) (param i32 retptr))
func handleCloseStdin(c *call, a []cabi.Value) cabi.Value {
	if err := c.handle(a[0]).CloseStdin(c.ctx); err != nil {
		return c.fail(err)
	}
	return cabi.Ok(nil)
}

// handleSignal serves
//
//	[method]process-handle.signal: func(sig: process-signal) -> result<_, error-code>
//	core: (func (param i32 self) (param i32 sig) (param i32 retptr))
//
// The 1.0.0 enum is a prefix of the 1.1.0 one, which is the registry's
// Signal order; lifting already trapped on a case out of the version's
// range.
func handleSignal(c *call, a []cabi.Value) cabi.Value {
	if err := c.handle(a[0]).Signal(c.ctx, registry.Signal(a[1].(uint32))); err != nil {
		return c.fail(err)
	}
	return cabi.Ok(nil)
}

// handleKill serves
//
//	[method]process-handle.kill: func() -> result<exit-info, error-code>
//	core: (func (param i32 self) (param i32 retptr))
func handleKill(c *call, a []cabi.Value) cabi.Value {
	e, err := c.handle(a[0]).Kill(c.ctx)
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(exitInfo(e))
}

// handleWait serves
//
//	[method]process-handle.wait: func(timeout-ms: option<u64>) -> result<exit-info, error-code>
//	core: (func (param i32 self) (param i32 i64 timeout-ms) (param i32 retptr))
func handleWait(c *call, a []cabi.Value) cabi.Value {
	e, err := c.handle(a[0]).Wait(c.ctx, optDur(a[1]))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(exitInfo(e))
}

// handleWaitWithOutput serves
//
//	[method]process-handle.wait-with-output: func(timeout-ms: option<u64>) -> result<process-result, error-code>
//	core: (func (param i32 self) (param i32 i64 timeout-ms) (param i32 retptr))
func handleWaitWithOutput(c *call, a []cabi.Value) cabi.Value {
	r, err := c.handle(a[0]).WaitWithOutput(c.ctx, optDur(a[1]))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(processResult(r))
}

// handleOSPid serves
//
//	[method]process-handle.os-pid: func() -> result<u32, error-code>
//	core: (func (param i32 self) (param i32 retptr))
func handleOSPid(c *call, a []cabi.Value) cabi.Value {
	pid, err := c.handle(a[0]).OSPid(c.ctx)
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(pid)
}

// handleDrop serves
//
//	[resource-drop]process-handle (the implicit destructor of own<process-handle>)
//	core: (func (param i32 self))
//
// A spawn-background handle kills and reaps its process; an attached
// handle detaches (registry Handle.Drop decides). A forged, dropped or
// double-dropped handle traps. A failed drop has nowhere to go in the
// guest: it is logged.
func handleDrop(c *call, a []cabi.Value) cabi.Value {
	h, err := c.inst.remove(c.v.rt, a[0].(uint32))
	if err != nil {
		c.trap("%v", err)
	}
	if err := h.Drop(c.ctx); err != nil {
		c.inst.logger().Warn("process-handle drop failed", "module", c.v.module, "err", err)
	}
	return nil
}

// --- functions of both versions ---

// spawn serves
//
//	spawn: func(request: spawn-request) -> result<process-result, error-code>
//	core: (func (param i32×13 i64 request) (param i32 retptr))
//
// spawn-request flattens to 14 values (cmd 2, args 2, stdin 3, env 2,
// cwd 3, timeout-ms i32 i64), within the 16 of MAX_FLAT_PARAMS.
func spawn(c *call, a []cabi.Value) cabi.Value {
	r, err := c.reg.Spawn(c.ctx, spawnRequest(a[0]))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(processResult(r))
}

// spawnBackground serves
//
//	spawn-background: func(request: spawn-request) -> result<process-handle, error-code>
//	core: (func (param i32×13 i64 request) (param i32 retptr))
func spawnBackground(c *call, a []cabi.Value) cabi.Value {
	if err := c.inst.room(); err != nil {
		return c.fail(err)
	}
	h, err := c.reg.SpawnBackground(c.ctx, spawnRequest(a[0]))
	if err != nil {
		return c.fail(err)
	}
	return c.own(h)
}

// --- 1.1.0: the persistent tier ---

// spawnPersistent serves
//
//	spawn-persistent: func(request: spawn-request, options: persist-options) -> result<process-id, error-code>
//	core: (func (param i32 params) (param i32 retptr))
//
// The params flatten to 14 + 21 = 35 values (1.2.0: 14 + 27), more than
// MAX_FLAT_PARAMS: the guest passes one pointer to the (request, options)
// tuple (size 184, align 8; 1.2.0: 208) in its memory.
func spawnPersistent(c *call, a []cabi.Value) cabi.Value {
	id, err := c.reg.SpawnPersistent(c.ctx, spawnRequest(a[0]), persistOptions(a[1], c.v.v12))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(id)
}

// attach serves
//
//	attach: func(id: process-id) -> result<process-handle, error-code>
//	core: (func (param i32 i32 id) (param i32 retptr))
func attach(c *call, a []cabi.Value) cabi.Value {
	if err := c.inst.room(); err != nil {
		return c.fail(err)
	}
	h, err := c.reg.Attach(c.ctx, a[0].(string))
	if err != nil {
		return c.fail(err)
	}
	return c.own(h)
}

// listProcesses serves
//
//	list-processes: func(label-filter: option<string>) -> result<list<process-info>, error-code>
//	core: (func (param i32 i32 i32 label-filter) (param i32 retptr))
func listProcesses(c *call, a []cabi.Value) cabi.Value {
	is, err := c.reg.List(c.ctx, optString(a[0]))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(infoList{is, c.v.v12})
}

// status serves
//
//	status: func(id: process-id) -> result<process-info, error-code>
//	core: (func (param i32 i32 id) (param i32 retptr))
func status(c *call, a []cabi.Value) cabi.Value {
	i, err := c.reg.Status(c.ctx, a[0].(string))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(processInfo(i, c.v.v12))
}

// statusMany serves
//
//	status-many: func(ids: list<process-id>) -> result<list<process-info>, error-code>
//	core: (func (param i32 i32 ids) (param i32 retptr))
func statusMany(c *call, a []cabi.Value) cabi.Value {
	is, err := c.reg.StatusMany(c.ctx, stringList(a[0]))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(infoList{is, c.v.v12})
}

// readSince serves
//
//	read-since: func(id: process-id, which-stream: log-stream, cursor: option<string>, max-bytes: u32) -> result<log-chunk, error-code>
//	core: (func (param i32 i32 id) (param i32 which-stream) (param i32 i32 i32 cursor) (param i32 max-bytes) (param i32 retptr))
func readSince(c *call, a []cabi.Value) cabi.Value {
	ch, err := c.reg.ReadSince(c.ctx, a[0].(string), registry.Stream(a[1].(uint32)), optString(a[2]), a[3].(uint32))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(logChunk(ch))
}

// readLogs serves
//
//	read-logs: func(id: process-id) -> result<read-logs-result, error-code>
//	core: (func (param i32 i32 id) (param i32 retptr))
func readLogs(c *call, a []cabi.Value) cabi.Value {
	l, err := c.reg.ReadLogs(c.ctx, a[0].(string))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(readLogsResult(l))
}

// writeStdin serves
//
//	write-stdin: func(id: process-id, data: list<u8>) -> result<u32, error-code>
//	core: (func (param i32 i32 id) (param i32 i32 data) (param i32 retptr))
func writeStdin(c *call, a []cabi.Value) cabi.Value {
	n, err := c.reg.WriteStdin(c.ctx, a[0].(string), a[1].([]byte))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(uint32(n))
}

// closeStdin serves
//
//	close-stdin: func(id: process-id) -> result<_, error-code>
//	core: (func (param i32 i32 id) (param i32 retptr))
func closeStdin(c *call, a []cabi.Value) cabi.Value {
	if err := c.reg.CloseStdin(c.ctx, a[0].(string)); err != nil {
		return c.fail(err)
	}
	return cabi.Ok(nil)
}

// signal serves
//
//	signal: func(id: process-id, sig: process-signal) -> result<_, error-code>
//	core: (func (param i32 i32 id) (param i32 sig) (param i32 retptr))
func signal(c *call, a []cabi.Value) cabi.Value {
	if err := c.reg.Signal(c.ctx, a[0].(string), registry.Signal(a[1].(uint32))); err != nil {
		return c.fail(err)
	}
	return cabi.Ok(nil)
}

// wait serves
//
//	wait: func(id: process-id, timeout-ms: u64) -> result<exit-info, error-code>
//	core: (func (param i32 i32 id) (param i64 timeout-ms) (param i32 retptr))
func wait(c *call, a []cabi.Value) cabi.Value {
	e, err := c.reg.Wait(c.ctx, a[0].(string), msDur(a[1].(uint64)))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(exitInfo(e))
}

// stop serves
//
//	stop: func(id: process-id, grace-ms: option<u64>) -> result<exit-info, error-code>
//	core: (func (param i32 i32 id) (param i32 i64 grace-ms) (param i32 retptr))
func stop(c *call, a []cabi.Value) cabi.Value {
	e, err := c.reg.Stop(c.ctx, a[0].(string), optDur(a[1]))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(exitInfo(e))
}

// release serves
//
//	release: func(id: process-id) -> result<_, error-code>
//	core: (func (param i32 i32 id) (param i32 retptr))
func release(c *call, a []cabi.Value) cabi.Value {
	if err := c.reg.Release(c.ctx, a[0].(string)); err != nil {
		return c.fail(err)
	}
	return cabi.Ok(nil)
}

// pollEvents serves
//
//	poll-events: func(cursor: u64, max: u32, timeout-ms: u64) -> result<event-batch, error-code>
//	core: (func (param i64 cursor) (param i32 max) (param i64 timeout-ms) (param i32 retptr))
func pollEvents(c *call, a []cabi.Value) cabi.Value {
	b, err := c.reg.PollEvents(c.ctx, a[0].(uint64), a[1].(uint32), msDur(a[2].(uint64)))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(eventBatch(b))
}

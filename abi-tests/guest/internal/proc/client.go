package proc

import (
	"runtime"

	"go.bytecodealliance.org/cm"
)

// Raw holds the core imports of one version (//go:wasmimport functions
// declared in packages p10 and p11). Every pointer is a linear-memory
// address (uint32); the last parameter is the return area.
type Raw struct {
	Spawn           func(cmdP, cmdN, argsP, argsN, stdinD, stdinP, stdinN, envP, envN, cwdD, cwdP, cwdN, toD uint32, to uint64, ret uint32)
	SpawnBackground func(cmdP, cmdN, argsP, argsN, stdinD, stdinP, stdinN, envP, envN, cwdD, cwdP, cwdN, toD uint32, to uint64, ret uint32)

	HandleReadLogs       func(h, ret uint32)
	HandleWriteStdin     func(h, p, n, ret uint32)
	HandleCloseStdin     func(h, ret uint32)
	HandleSignal         func(h, sig, ret uint32)
	HandleKill           func(h, ret uint32)
	HandleWait           func(h, d uint32, v uint64, ret uint32)
	HandleWaitWithOutput func(h, d uint32, v uint64, ret uint32)
	HandleOsPid          func(h, ret uint32)
	HandleDrop           func(h uint32)

	// 1.1.0 only.
	SpawnPersistent func(params, ret uint32)
	Attach          func(p, n, ret uint32)
	ListProcesses   func(d, p, n, ret uint32)
	Status          func(p, n, ret uint32)
	StatusMany      func(p, n, ret uint32)
	ReadSince       func(p, n, stream, d, cp, cn, max, ret uint32)
	ReadLogs        func(p, n, ret uint32)
	WriteStdin      func(p, n, dp, dn, ret uint32)
	CloseStdin      func(p, n, ret uint32)
	Signal          func(p, n, sig, ret uint32)
	Wait            func(p, n uint32, t uint64, ret uint32)
	Stop            func(p, n, d uint32, g uint64, ret uint32)
	Release         func(p, n, ret uint32)
	PollEvents      func(cursor uint64, max uint32, t uint64, ret uint32)
}

// Client calls one version's imports.
type Client struct {
	raw Raw
	l   Layout
}

func NewClient(raw Raw, l Layout) *Client { return &Client{raw: raw, l: l} }

// ProcessHandle is an own<process-handle> of this instance.
type ProcessHandle struct {
	c *Client
	h uint32
}

func (h ProcessHandle) Index() uint32 { return h.h }

func liftU32(a uint32) uint32 { return u32(a) }

func optU64Flat(v cm.Option[uint64]) (uint32, uint64) {
	if p := v.Some(); p != nil {
		return 1, *p
	}
	return 0, 0
}

func (c *Client) Spawn(r SpawnRequest) Result[ProcessResult] {
	var l lowerer
	f := l.request(r)
	ra := newArea()
	c.raw.Spawn(f.cmdP, f.cmdN, f.argsP, f.argsN, f.stdinD, f.stdinP, f.stdinN, f.envP, f.envN, f.cwdD, f.cwdP, f.cwdN, f.toD, f.to, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), o("process-result/align"), liftProcessResult)
}

func (c *Client) SpawnBackground(r SpawnRequest) Result[ProcessHandle] {
	var l lowerer
	f := l.request(r)
	ra := newArea()
	c.raw.SpawnBackground(f.cmdP, f.cmdN, f.argsP, f.argsN, f.stdinD, f.stdinP, f.stdinN, f.envP, f.envN, f.cwdD, f.cwdP, f.cwdN, f.toD, f.to, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), 4, func(a uint32) ProcessHandle { return ProcessHandle{c: c, h: u32(a)} })
}

func (h ProcessHandle) ReadLogs() Result[ReadLogsResult] {
	ra := newArea()
	h.c.raw.HandleReadLogs(h.h, ra.addr())
	defer runtime.KeepAlive(ra)
	return liftResult(h.c.l, ra.addr(), o("read-logs-result/align"), liftReadLogs)
}

func (h ProcessHandle) WriteStdin(data cm.List[uint8]) Result[uint32] {
	var l lowerer
	p, n := l.bytes(data.Slice())
	ra := newArea()
	h.c.raw.HandleWriteStdin(h.h, p, n, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(h.c.l, ra.addr(), 4, liftU32)
}

func (h ProcessHandle) CloseStdin() Result[struct{}] {
	ra := newArea()
	h.c.raw.HandleCloseStdin(h.h, ra.addr())
	defer runtime.KeepAlive(ra)
	return liftResult[struct{}](h.c.l, ra.addr(), 1, nil)
}

func (h ProcessHandle) Signal(sig ProcessSignal) Result[struct{}] {
	ra := newArea()
	h.c.raw.HandleSignal(h.h, uint32(sig), ra.addr())
	defer runtime.KeepAlive(ra)
	return liftResult[struct{}](h.c.l, ra.addr(), 1, nil)
}

func (h ProcessHandle) Kill() Result[ExitInfo] {
	ra := newArea()
	h.c.raw.HandleKill(h.h, ra.addr())
	defer runtime.KeepAlive(ra)
	return liftResult(h.c.l, ra.addr(), o("exit-info/align"), liftExit)
}

func (h ProcessHandle) Wait(timeoutMs cm.Option[uint64]) Result[ExitInfo] {
	d, v := optU64Flat(timeoutMs)
	ra := newArea()
	h.c.raw.HandleWait(h.h, d, v, ra.addr())
	defer runtime.KeepAlive(ra)
	return liftResult(h.c.l, ra.addr(), o("exit-info/align"), liftExit)
}

func (h ProcessHandle) WaitWithOutput(timeoutMs cm.Option[uint64]) Result[ProcessResult] {
	d, v := optU64Flat(timeoutMs)
	ra := newArea()
	h.c.raw.HandleWaitWithOutput(h.h, d, v, ra.addr())
	defer runtime.KeepAlive(ra)
	return liftResult(h.c.l, ra.addr(), o("process-result/align"), liftProcessResult)
}

func (h ProcessHandle) OsPid() Result[uint32] {
	ra := newArea()
	h.c.raw.HandleOsPid(h.h, ra.addr())
	defer runtime.KeepAlive(ra)
	return liftResult(h.c.l, ra.addr(), 4, liftU32)
}

// ResourceDrop is [resource-drop]process-handle.
func (h ProcessHandle) ResourceDrop() { h.c.raw.HandleDrop(h.h) }

// The persistent tier (1.1.0).

func liftID(a uint32) ProcessID { return ProcessID(liftString(a)) }

func (c *Client) SpawnPersistent(r SpawnRequest, po PersistOptions) Result[ProcessID] {
	var l lowerer
	p := l.persistParams(r, po)
	ra := newArea()
	c.raw.SpawnPersistent(p, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), 4, liftID)
}

func (c *Client) Attach(id ProcessID) Result[ProcessHandle] {
	var l lowerer
	p, n := l.str(string(id))
	ra := newArea()
	c.raw.Attach(p, n, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), 4, func(a uint32) ProcessHandle { return ProcessHandle{c: c, h: u32(a)} })
}

func (c *Client) ListProcesses(labelFilter cm.Option[string]) Result[cm.List[ProcessInfo]] {
	var l lowerer
	var d, p, n uint32
	if s := labelFilter.Some(); s != nil {
		d = 1
		p, n = l.str(*s)
	}
	ra := newArea()
	c.raw.ListProcesses(d, p, n, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), 4, liftProcessInfos)
}

func (c *Client) Status(id ProcessID) Result[ProcessInfo] {
	var l lowerer
	p, n := l.str(string(id))
	ra := newArea()
	c.raw.Status(p, n, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), o("process-info/align"), liftProcessInfo)
}

func (c *Client) StatusMany(ids cm.List[ProcessID]) Result[cm.List[ProcessInfo]] {
	var l lowerer
	ss := make([]string, ids.Len())
	for i, id := range ids.Slice() {
		ss[i] = string(id)
	}
	p, n := l.strList(ss)
	ra := newArea()
	c.raw.StatusMany(p, n, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), 4, liftProcessInfos)
}

func (c *Client) ReadSince(id ProcessID, which LogStream, cursor cm.Option[string], maxBytes uint32) Result[LogChunk] {
	var l lowerer
	p, n := l.str(string(id))
	var d, cp, cn uint32
	if s := cursor.Some(); s != nil {
		d = 1
		cp, cn = l.str(*s)
	}
	ra := newArea()
	c.raw.ReadSince(p, n, uint32(which), d, cp, cn, maxBytes, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), o("log-chunk/align"), liftLogChunk)
}

func (c *Client) ReadLogs(id ProcessID) Result[ReadLogsResult] {
	var l lowerer
	p, n := l.str(string(id))
	ra := newArea()
	c.raw.ReadLogs(p, n, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), o("read-logs-result/align"), liftReadLogs)
}

func (c *Client) WriteStdin(id ProcessID, data cm.List[uint8]) Result[uint32] {
	var l lowerer
	p, n := l.str(string(id))
	dp, dn := l.bytes(data.Slice())
	ra := newArea()
	c.raw.WriteStdin(p, n, dp, dn, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), 4, liftU32)
}

func (c *Client) CloseStdin(id ProcessID) Result[struct{}] {
	var l lowerer
	p, n := l.str(string(id))
	ra := newArea()
	c.raw.CloseStdin(p, n, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult[struct{}](c.l, ra.addr(), 1, nil)
}

func (c *Client) Signal(id ProcessID, sig ProcessSignal) Result[struct{}] {
	var l lowerer
	p, n := l.str(string(id))
	ra := newArea()
	c.raw.Signal(p, n, uint32(sig), ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult[struct{}](c.l, ra.addr(), 1, nil)
}

func (c *Client) Wait(id ProcessID, timeoutMs uint64) Result[ExitInfo] {
	var l lowerer
	p, n := l.str(string(id))
	ra := newArea()
	c.raw.Wait(p, n, timeoutMs, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), o("exit-info/align"), liftExit)
}

func (c *Client) Stop(id ProcessID, graceMs cm.Option[uint64]) Result[ExitInfo] {
	var l lowerer
	p, n := l.str(string(id))
	d, v := optU64Flat(graceMs)
	ra := newArea()
	c.raw.Stop(p, n, d, v, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), o("exit-info/align"), liftExit)
}

func (c *Client) Release(id ProcessID) Result[struct{}] {
	var l lowerer
	p, n := l.str(string(id))
	ra := newArea()
	c.raw.Release(p, n, ra.addr())
	runtime.KeepAlive(&l)
	defer runtime.KeepAlive(ra)
	return liftResult[struct{}](c.l, ra.addr(), 1, nil)
}

func (c *Client) PollEvents(cursor uint64, max uint32, timeoutMs uint64) Result[EventBatch] {
	ra := newArea()
	c.raw.PollEvents(cursor, max, timeoutMs, ra.addr())
	defer runtime.KeepAlive(ra)
	return liftResult(c.l, ra.addr(), o("event-batch/align"), liftEventBatch)
}

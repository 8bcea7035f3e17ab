// Package checks holds the end-to-end conformance checks the guests run
// inside the host: each calls WIT functions through package proc, records
// their names in an rt.Report, and records every result that is not what
// the WIT documents.
package checks

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/proc"
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/rt"
	"go.bytecodealliance.org/cm"
)

func sh(script string) proc.SpawnRequest {
	return proc.SpawnRequest{Cmd: "/bin/sh", Args: cm.ToList([]string{"-c", script})}
}

func bytesOf(s string) cm.List[uint8] { return cm.ToList([]byte(s)) }

func str(l cm.List[uint8]) string { return string(l.Slice()) }

func exitIs(e proc.ExitInfo, wantCode, wantSig int32) bool {
	c, s := e.ExitCode.Some(), e.Signal.Some()
	if wantSig != 0 {
		return s != nil && *s == wantSig && c == nil
	}
	return c != nil && *c == wantCode && s == nil
}

func exitStr(e proc.ExitInfo) string {
	b, _ := json.Marshal(map[string]*int32{"exit-code": e.ExitCode.Some(), "signal": e.Signal.Some()})
	return string(b)
}

func errIs(e *proc.ErrorCode, want string) bool { return e != nil && e.String() == want }

func errStr(e *proc.ErrorCode) string {
	if e == nil {
		return "<ok>"
	}
	s := e.String()
	for _, p := range []*string{e.CapabilityDenied(), e.InvalidInput(), e.BoundaryEscape(), e.TooLarge(), e.Unavailable(), e.Internal()} {
		if p != nil {
			s += "(" + *p + ")"
		}
	}
	return s
}

// Echo checks a string round trip through the export glue.
func Echo(r *rt.Report, input string) { r.Data["echo"] = input }

// Ephemeral calls every function of the ephemeral tier (spawn,
// spawn-background and every process-handle method, including the drop)
// and checks what they return.
func Ephemeral(r *rt.Report, c *proc.Client) {
	r.Call("spawn")
	req := sh(`printf "out:$ABI_X"; printf err >&2; exit 3`)
	req.Env = cm.ToList([]proc.EnvVar{{Key: "ABI_X", Value: "y"}})
	req.TimeoutMs = cm.Some[uint64](20000)
	if res := c.Spawn(req); res.IsErr() {
		r.Failf("spawn: %s", errStr(res.Err()))
	} else {
		pr := res.OK()
		r.Check(str(pr.Stdout) == "out:y", "spawn stdout %q, want out:y", str(pr.Stdout))
		r.Check(str(pr.Stderr) == "err", "spawn stderr %q, want err", str(pr.Stderr))
		r.Check(exitIs(pr.Exit, 3, 0), "spawn exit %s, want code 3", exitStr(pr.Exit))
		r.Check(!pr.Truncated, "spawn truncated")
	}
	req = sh(`cat`)
	req.Stdin = cm.Some(bytesOf("hello\x00\xff"))
	if res := c.Spawn(req); res.IsErr() {
		r.Failf("spawn(stdin): %s", errStr(res.Err()))
	} else {
		r.Check(str(res.OK().Stdout) == "hello\x00\xff", "spawn(stdin) stdout %q", str(res.OK().Stdout))
		r.Check(exitIs(res.OK().Exit, 0, 0), "spawn(stdin) exit %s", exitStr(res.OK().Exit))
	}
	req = sh(`exec sleep 30`)
	req.TimeoutMs = cm.Some[uint64](300)
	if res := c.Spawn(req); res.IsErr() {
		r.Failf("spawn(timeout): %s", errStr(res.Err()))
	} else {
		r.Check(exitIs(res.OK().Exit, 0, 9), "spawn(timeout 300ms) exit %s, want signal 9", exitStr(res.OK().Exit))
	}
	if res := c.Spawn(proc.SpawnRequest{Cmd: "/nonexistent/abi-denied"}); !errIs(res.Err(), "capability-denied") {
		r.Failf("spawn(not in exec): %s, want capability-denied", errStr(res.Err()))
	}
	req = sh(`true`)
	req.Env = cm.ToList([]proc.EnvVar{{Key: "LD_PRELOAD", Value: "/x.so"}})
	if res := c.Spawn(req); !errIs(res.Err(), "invalid-input") {
		r.Failf("spawn(env LD_PRELOAD): %s, want invalid-input", errStr(res.Err()))
	}
	req = sh(`true`)
	req.CWD = cm.Some("../..")
	if res := c.Spawn(req); !errIs(res.Err(), "boundary-escape") {
		r.Failf("spawn(cwd ../..): %s, want boundary-escape", errStr(res.Err()))
	}

	// spawn-background writes the stdin prelude, then keeps stdin open for
	// the handle's write-stdin until close-stdin (or the drop).
	r.Call("spawn-background")
	bg := sh(`read a; read b; echo "got:$a$b"; echo e >&2; exec sleep 30`)
	bg.Stdin = cm.Some(bytesOf("x\n"))
	hr := c.SpawnBackground(bg)
	if hr.IsErr() {
		r.Failf("spawn-background: %s", errStr(hr.Err()))
		return
	}
	h := *hr.OK()
	r.Call("[method]process-handle.os-pid")
	if p := h.OsPid(); p.IsErr() || *p.OK() == 0 {
		r.Failf("os-pid: %s", errStr(p.Err()))
	}
	r.Call("[method]process-handle.write-stdin")
	if w := h.WriteStdin(bytesOf("hi\n")); w.IsErr() || *w.OK() != 3 {
		r.Failf("write-stdin after the stdin prelude: %s, want ok(3)", errStr(w.Err()))
	}
	r.Call("[method]process-handle.close-stdin")
	if x := h.CloseStdin(); x.IsErr() {
		r.Failf("close-stdin: %s", errStr(x.Err()))
	}
	if x := h.CloseStdin(); x.IsErr() {
		r.Failf("close-stdin (again, idempotent): %s", errStr(x.Err()))
	}
	if w := h.WriteStdin(bytesOf("late\n")); !errIs(w.Err(), "closed") {
		r.Failf("write-stdin after close-stdin: %s, want closed", errStr(w.Err()))
	}
	r.Call("[method]process-handle.read-logs")
	r.Call("[method]process-handle.wait")
	var out, errOut string
	for i := 0; i < 200 && !(strings.Contains(out, "got:xhi") && strings.Contains(errOut, "e")); i++ {
		lr := h.ReadLogs()
		if lr.IsErr() {
			r.Failf("read-logs: %s", errStr(lr.Err()))
			break
		}
		out += str(lr.OK().Stdout)
		errOut += str(lr.OK().Stderr)
		r.Check(lr.OK().Running, "read-logs: running=false while the process sleeps")
		if w := h.Wait(cm.Some[uint64](25)); !errIs(w.Err(), "wait-timeout") {
			r.Failf("wait(25ms) on a sleeping process: %s, want wait-timeout", errStr(w.Err()))
			break
		}
	}
	r.Check(strings.Contains(out, "got:xhi"), "read-logs stdout %q, want got:xhi (stdin prelude x, then write-stdin hi)", out)
	r.Check(strings.Contains(errOut, "e"), "read-logs stderr %q, want e", errOut)
	r.Call("[method]process-handle.kill")
	if k := h.Kill(); k.IsErr() {
		r.Failf("kill: %s", errStr(k.Err()))
	} else {
		r.Check(exitIs(*k.OK(), 0, 9), "kill exit %s, want signal 9", exitStr(*k.OK()))
	}
	r.Call("[method]process-handle.wait-with-output")
	if wo := h.WaitWithOutput(cm.Some[uint64](5000)); wo.IsErr() {
		r.Failf("wait-with-output after kill: %s", errStr(wo.Err()))
	} else {
		r.Check(exitIs(wo.OK().Exit, 0, 9), "wait-with-output exit %s, want signal 9", exitStr(wo.OK().Exit))
	}
	r.Call("[resource-drop]process-handle")
	h.ResourceDrop()

	r.Call("[method]process-handle.signal")
	if hr := c.SpawnBackground(sh(`exec sleep 30`)); hr.IsErr() {
		r.Failf("spawn-background(sleep): %s", errStr(hr.Err()))
	} else {
		h := *hr.OK()
		if s := h.Signal(proc.ProcessSignalTerm); s.IsErr() {
			r.Failf("signal(term): %s", errStr(s.Err()))
		}
		if w := h.Wait(cm.Some[uint64](10000)); w.IsErr() {
			r.Failf("wait after term: %s", errStr(w.Err()))
		} else {
			r.Check(exitIs(*w.OK(), 0, 15), "exit after signal(term) %s, want signal 15", exitStr(*w.OK()))
		}
		h.ResourceDrop()
	}

	if hr := c.SpawnBackground(sh(`printf abc; printf def >&2`)); hr.IsErr() {
		r.Failf("spawn-background(printf): %s", errStr(hr.Err()))
	} else {
		h := *hr.OK()
		if w := h.Wait(cm.None[uint64]()); w.IsErr() {
			r.Failf("wait(none): %s", errStr(w.Err()))
		} else {
			r.Check(exitIs(*w.OK(), 0, 0), "wait(none) exit %s, want code 0", exitStr(*w.OK()))
		}
		if wo := h.WaitWithOutput(cm.None[uint64]()); wo.IsErr() {
			r.Failf("wait-with-output(none): %s", errStr(wo.Err()))
		} else {
			r.Check(str(wo.OK().Stdout) == "abc" && str(wo.OK().Stderr) == "def", "wait-with-output streams %q %q, want abc def", str(wo.OK().Stdout), str(wo.OK().Stderr))
		}
		h.ResourceDrop()
	}

	// Dropping the handle of a running process kills and reaps it.
	if hr := c.SpawnBackground(sh(`exec sleep 30`)); hr.IsErr() {
		r.Failf("spawn-background(sleep): %s", errStr(hr.Err()))
	} else {
		h := *hr.OK()
		p := h.OsPid()
		h.ResourceDrop()
		if p.IsOK() {
			pid := strconv.FormatUint(uint64(*p.OK()), 10)
			chk := proc.SpawnRequest{Cmd: "/bin/sh", Args: cm.ToList([]string{"-c",
				`i=0; while kill -0 "$1" 2>/dev/null; do i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.05; done; exit 0`, "sh", pid})}
			if res := c.Spawn(chk); res.IsErr() {
				r.Failf("spawn(kill -0 check): %s", errStr(res.Err()))
			} else if !exitIs(res.OK().Exit, 0, 0) {
				r.Failf("process %s still alive 5 s after its handle was dropped (check exited %s)", pid, exitStr(res.OK().Exit))
			}
		}
	}
}

const echoScript = `echo "nofile:$(ulimit -n)"; echo started; while read l; do echo "echo:$l"; done; echo bye >&2`

func echoOptions() proc.PersistOptions {
	return proc.PersistOptions{
		Label:           cm.Some("abi-echo"),
		KeepStdinOpen:   true,
		Overflow:        proc.OverflowPolicyDropOldest,
		LogRingBytes:    cm.Some[uint32](65536),
		MaxLifetimeMs:   cm.Some[uint64](600000),
		IdleTimeoutMs:   cm.Some[uint64](600000),
		ExitRetentionMs: cm.Some[uint64](600000),
		// The last field of the params record: the process prints it back.
		Limits: proc.ResourceLimits{MaxOpenFiles: cm.Some[uint32](200)},
	}
}

func validID(id proc.ProcessID) bool {
	if len(id) != 52 {
		return false
	}
	for _, ch := range id {
		if !(ch >= 'a' && ch <= 'z' || ch >= '2' && ch <= '7') {
			return false
		}
	}
	return true
}

// PersistStart starts the echo process; its ID goes to data.id.
func PersistStart(r *rt.Report, c *proc.Client) {
	r.Call("spawn-persistent")
	o := echoOptions()
	o.IdleTimeoutMs = cm.Some[uint64](0)
	if res := c.SpawnPersistent(sh(echoScript), o); !errIs(res.Err(), "invalid-input") {
		r.Failf("spawn-persistent(idle-timeout 0): %s, want invalid-input", errStr(res.Err()))
	}
	res := c.SpawnPersistent(sh(echoScript), echoOptions())
	if res.IsErr() {
		r.Failf("spawn-persistent: %s", errStr(res.Err()))
		return
	}
	id := *res.OK()
	r.Check(validID(id), "process ID %q is not 52 characters of [a-z2-7]", id)
	r.Data["id"] = string(id)
}

func inputID(r *rt.Report, input string) proc.ProcessID {
	var in struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(input), &in); err != nil || in.ID == "" {
		r.Failf("input %q: want {\"id\": ...}", input)
	}
	return proc.ProcessID(in.ID)
}

// PersistProbe reports status(id) for another principal's view.
func PersistProbe(r *rt.Report, c *proc.Client, input string) {
	id := inputID(r, input)
	r.Call("status")
	if st := c.Status(id); st.IsErr() {
		r.Data["status"] = st.Err().String()
	} else {
		r.Data["status"] = "found"
	}
	r.Call("attach")
	if a := c.Attach(id); a.IsErr() {
		r.Data["attach"] = a.Err().String()
	} else {
		r.Data["attach"] = "attached"
		a.OK().ResourceDrop()
	}
}

// PersistDenied expects spawn-persistent to be refused (no principal).
func PersistDenied(r *rt.Report, c *proc.Client) {
	r.Call("spawn-persistent")
	res := c.SpawnPersistent(sh(echoScript), echoOptions())
	r.Check(errIs(res.Err(), "persist-unsupported"), "spawn-persistent without a principal: %s, want persist-unsupported", errStr(res.Err()))
	if res.IsOK() {
		c.Stop(*res.OK(), cm.Some[uint64](0))
		c.Release(*res.OK())
	}
}

const forged = proc.ProcessID("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")

func hasID(l cm.List[proc.ProcessInfo], id proc.ProcessID) bool {
	for _, i := range l.Slice() {
		if i.ID == id {
			return true
		}
	}
	return false
}

// pause sleeps about ms through a bounded wait on a running process; it
// reports false (and a failure) when the wait did not time out.
func pause(r *rt.Report, c *proc.Client, id proc.ProcessID, ms uint64) bool {
	if w := c.Wait(id, ms); !errIs(w.Err(), "wait-timeout") {
		r.Failf("wait(%d ms) on a running process: %s, want wait-timeout", ms, errStr(w.Err()))
		return false
	}
	return true
}

// PersistUse calls every function of the persistent tier on the process
// PersistStart started (possibly on another instance), then ends it.
func PersistUse(r *rt.Report, c *proc.Client, input string) {
	id := inputID(r, input)
	if id == "" {
		return
	}
	r.Call("status")
	st := c.Status(id)
	if st.IsErr() {
		r.Failf("status: %s", errStr(st.Err()))
		return
	}
	info := *st.OK()
	r.Check(info.ID == id, "status id %q", info.ID)
	r.Check(info.Label == "abi-echo", "status label %q, want abi-echo", info.Label)
	r.Check(info.Phase != proc.ProcessPhaseExited, "status phase %d, want running", info.Phase)
	r.Check(info.StdinOpen, "status stdin-open false, want true (keep-stdin-open)")
	r.Check(strings.Contains(info.Command, "sh"), "status command %q", info.Command)
	r.Check(info.OsPid.Some() != nil, "status os-pid none while running")
	r.Check(info.Exit.None() && info.ExitReason.None(), "status exit set while running")

	r.Call("list-processes")
	if l := c.ListProcesses(cm.Some("abi-ec")); l.IsErr() || !hasID(*l.OK(), id) {
		r.Failf("list-processes(abi-ec): %s, or the id is missing", errStr(l.Err()))
	}
	if l := c.ListProcesses(cm.None[string]()); l.IsErr() || !hasID(*l.OK(), id) {
		r.Failf("list-processes(none): %s, or the id is missing", errStr(l.Err()))
	}
	if l := c.ListProcesses(cm.Some("zzz-no-such-label")); l.IsErr() || hasID(*l.OK(), id) {
		r.Failf("list-processes(zzz-no-such-label): %s, or the id is listed", errStr(l.Err()))
	}
	r.Call("status-many")
	if sm := c.StatusMany(cm.ToList([]proc.ProcessID{forged, id})); sm.IsErr() {
		r.Failf("status-many: %s", errStr(sm.Err()))
	} else {
		l := sm.OK().Slice()
		r.Check(len(l) == 1 && l[0].ID == id, "status-many([forged, id]) returned %d entries, want only id", len(l))
	}

	r.Call("write-stdin")
	r.Call("wait")
	if w := c.WriteStdin(id, bytesOf("ping\n")); w.IsErr() || *w.OK() != 5 {
		r.Failf("write-stdin: %s", errStr(w.Err()))
	}
	r.Call("read-since")
	var chunk proc.LogChunk
	var out string
	for i := 0; i < 200; i++ {
		ch := c.ReadSince(id, proc.LogStreamStdout, cm.None[string](), 65536)
		if ch.IsErr() {
			r.Failf("read-since: %s", errStr(ch.Err()))
			break
		}
		chunk, out = *ch.OK(), str(ch.OK().Data)
		if strings.Contains(out, "echo:ping") || !pause(r, c, id, 25) {
			break
		}
	}
	r.Check(strings.Contains(out, "started\n") && strings.Contains(out, "echo:ping\n"), "read-since stdout %q, want started and echo:ping", out)
	r.Check(strings.Contains(out, "nofile:200\n"), "read-since stdout %q: limits.max-open-files=200 not applied (persist-options lowered or lifted wrongly?)", out)
	r.Check(chunk.Next != "" && !chunk.EOF && chunk.BytesDropped == 0, "read-since chunk next=%q eof=%v dropped=%d", chunk.Next, chunk.EOF, chunk.BytesDropped)
	if ch := c.ReadSince(id, proc.LogStreamStdout, cm.Some(chunk.Next), 65536); ch.IsErr() {
		r.Failf("read-since(next): %s", errStr(ch.Err()))
	} else {
		r.Check(ch.OK().Data.Len() == 0, "read-since(next) returned %q, want nothing new", str(ch.OK().Data))
	}
	if ch := c.ReadSince(id, proc.LogStreamStdout, cm.Some("not-a-cursor"), 16); !errIs(ch.Err(), "no-such-process") {
		r.Failf("read-since(malformed cursor): %s, want no-such-process", errStr(ch.Err()))
	}
	r.Call("read-logs")
	if l := c.ReadLogs(id); l.IsErr() {
		r.Failf("read-logs: %s", errStr(l.Err()))
	} else {
		r.Check(strings.Contains(str(l.OK().Stdout), "echo:ping"), "read-logs stdout %q, want echo:ping", str(l.OK().Stdout))
		r.Check(l.OK().Running, "read-logs running=false")
	}
	if l := c.ReadLogs(id); l.IsErr() {
		r.Failf("read-logs (2nd): %s", errStr(l.Err()))
	} else {
		r.Check(l.OK().Stdout.Len() == 0, "read-logs did not drain: the 2nd read returned %q", str(l.OK().Stdout))
	}

	r.Call("attach")
	if a := c.Attach(forged); !errIs(a.Err(), "no-such-process") {
		r.Failf("attach(forged): %s, want no-such-process", errStr(a.Err()))
	}
	if a := c.Attach(id); a.IsErr() {
		r.Failf("attach: %s", errStr(a.Err()))
	} else {
		h := *a.OK()
		if p := h.OsPid(); p.IsErr() || info.OsPid.Some() == nil || *p.OK() != *info.OsPid.Some() {
			r.Failf("attached os-pid: %s, want the status os-pid", errStr(p.Err()))
		}
		if w := h.WriteStdin(bytesOf("pong\n")); w.IsErr() || *w.OK() != 5 {
			r.Failf("attached write-stdin: %s", errStr(w.Err()))
		}
		if w := h.Wait(cm.None[uint64]()); !errIs(w.Err(), "invalid-input") {
			r.Failf("attached wait(none): %s, want invalid-input", errStr(w.Err()))
		}
		var got string
		for i := 0; i < 200 && !strings.Contains(got, "echo:pong"); i++ {
			l := h.ReadLogs()
			if l.IsErr() {
				r.Failf("attached read-logs: %s", errStr(l.Err()))
				break
			}
			got += str(l.OK().Stdout)
			if strings.Contains(got, "echo:pong") {
				break
			}
			if w := h.Wait(cm.Some[uint64](25)); !errIs(w.Err(), "wait-timeout") {
				r.Failf("attached wait(25ms): %s, want wait-timeout", errStr(w.Err()))
				break
			}
		}
		r.Check(strings.Contains(got, "echo:pong"), "attached read-logs %q, want echo:pong", got)
		if s := h.Signal(proc.ProcessSignalCont); s.IsErr() {
			r.Failf("attached signal(cont): %s", errStr(s.Err()))
		}
		h.ResourceDrop()
	}
	if st := c.Status(id); st.IsErr() || st.OK().Phase == proc.ProcessPhaseExited {
		r.Failf("dropping an attached handle ended the process: %s", errStr(st.Err()))
	}

	r.Call("signal")
	if s := c.Signal(id, proc.ProcessSignalStop); s.IsErr() {
		r.Failf("signal(stop): %s", errStr(s.Err()))
	}
	if s := c.Signal(id, proc.ProcessSignalCont); s.IsErr() {
		r.Failf("signal(cont): %s", errStr(s.Err()))
	}

	r.Call("poll-events")
	var cursor uint64
	if ev := c.PollEvents(0, 100, 0); ev.IsErr() {
		r.Failf("poll-events: %s", errStr(ev.Err()))
	} else {
		cursor = ev.OK().Next
		ready := false
		for _, e := range ev.OK().Events.Slice() {
			if e.ID == id && e.Kind.LogReady() != nil && *e.Kind.LogReady() == proc.LogStreamStdout {
				ready = true
			}
		}
		r.Check(ready, "poll-events(0): no log-ready(stdout) event for the process among %d events", ev.OK().Events.Len())
	}

	r.Call("close-stdin")
	if x := c.CloseStdin(id); x.IsErr() {
		r.Failf("close-stdin: %s", errStr(x.Err()))
	}
	if x := c.CloseStdin(id); x.IsErr() {
		r.Failf("close-stdin (again, idempotent): %s", errStr(x.Err()))
	}
	if w := c.Wait(id, 10000); w.IsErr() {
		r.Failf("wait after close-stdin: %s", errStr(w.Err()))
	} else {
		r.Check(exitIs(*w.OK(), 0, 0), "exit after close-stdin %s, want code 0", exitStr(*w.OK()))
	}
	var eof bool
	var errText string
	var cur cm.Option[string]
	for i := 0; i < 100 && !eof; i++ {
		ch := c.ReadSince(id, proc.LogStreamStderr, cur, 4096)
		if ch.IsErr() {
			r.Failf("read-since(stderr): %s", errStr(ch.Err()))
			break
		}
		errText += str(ch.OK().Data)
		eof = ch.OK().EOF
		cur = cm.Some(ch.OK().Next)
	}
	r.Check(eof && errText == "bye\n", "read-since(stderr) %q eof=%v, want bye and eof", errText, eof)
	exited := false
	for i := 0; i < 20 && !exited; i++ {
		ev := c.PollEvents(cursor, 100, 500)
		if ev.IsErr() {
			r.Failf("poll-events(%d): %s", cursor, errStr(ev.Err()))
			break
		}
		for _, e := range ev.OK().Events.Slice() {
			if x := e.Kind.Exited(); e.ID == id && x != nil {
				exited = true
				r.Check(x.Reason == proc.ExitReasonSelfExit && exitIs(x.Exit, 0, 0), "exited event: reason %d exit %s, want self-exit code 0", x.Reason, exitStr(x.Exit))
			}
		}
		cursor = ev.OK().Next
	}
	r.Check(exited, "poll-events: no exited event for the process")

	r.Call("stop")
	if s := c.Stop(id, cm.Some[uint64](100)); s.IsErr() {
		r.Failf("stop (exited): %s", errStr(s.Err()))
	} else {
		r.Check(exitIs(*s.OK(), 0, 0), "stop of an exited process: %s, want its exit code 0", exitStr(*s.OK()))
	}
	if st := c.Status(id); st.IsErr() || st.OK().Phase != proc.ProcessPhaseExited || st.OK().ExitReason.None() {
		r.Failf("status after exit: %s, want phase exited with a reason", errStr(st.Err()))
	}
	r.Call("release")
	if rl := c.Release(id); rl.IsErr() {
		r.Failf("release: %s", errStr(rl.Err()))
	}
	if st := c.Status(id); !errIs(st.Err(), "no-such-process") {
		r.Failf("status after release: %s, want no-such-process", errStr(st.Err()))
	}
	if w := c.WriteStdin(forged, bytesOf("x")); !errIs(w.Err(), "no-such-process") {
		r.Failf("write-stdin(forged): %s, want no-such-process", errStr(w.Err()))
	}

	o := echoOptions()
	o.Label = cm.Some("abi-stop")
	o.KeepStdinOpen = false
	o.Overflow = proc.OverflowPolicyBackpressure
	if res := c.SpawnPersistent(sh(`exec sleep 30`), o); res.IsErr() {
		r.Failf("spawn-persistent(sleep): %s", errStr(res.Err()))
	} else {
		id2 := *res.OK()
		if rl := c.Release(id2); !errIs(rl.Err(), "invalid-input") {
			r.Failf("release while running: %s, want invalid-input", errStr(rl.Err()))
		}
		if s := c.Stop(id2, cm.Some[uint64](2000)); s.IsErr() {
			r.Failf("stop: %s", errStr(s.Err()))
		} else {
			r.Check(exitIs(*s.OK(), 0, 15), "stop exit %s, want signal 15", exitStr(*s.OK()))
		}
		if rl := c.Release(id2); rl.IsErr() {
			r.Failf("release after stop: %s", errStr(rl.Err()))
		}
	}
	if res := c.SpawnPersistent(sh(`exec sleep 30`), o); res.IsErr() {
		r.Failf("spawn-persistent(sleep): %s", errStr(res.Err()))
	} else {
		id3 := *res.OK()
		if a := c.Attach(id3); a.IsErr() {
			r.Failf("attach: %s", errStr(a.Err()))
		} else {
			h := *a.OK()
			if k := h.Kill(); k.IsErr() || !exitIs(*k.OK(), 0, 9) {
				r.Failf("attached kill: %s", errStr(k.Err()))
			}
			if wo := h.WaitWithOutput(cm.Some[uint64](1000)); wo.IsErr() || !exitIs(wo.OK().Exit, 0, 9) {
				r.Failf("attached wait-with-output after kill: %s", errStr(wo.Err()))
			}
			h.ResourceDrop()
		}
		c.Release(id3)
	}
}

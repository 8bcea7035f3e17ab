package host_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component"
)

// The capsule:process@1.1.0 contract end to end through the component
// path: the JS capsule's `do` tool runs a script of calls through the
// bindings componentize-js generated (a third-party binding generator,
// not ours), lowered by the host's canon lower onto the same host
// functions core capsules use.

// jsStep is one call of the script: a function, or "NAME.METHOD" on a
// handle saved as NAME, "NAME.drop"; "$NAME" arguments are saved results.
type jsStep struct {
	Fn   string `json:"fn"`
	Args []any  `json:"args,omitempty"`
	As   string `json:"as,omitempty"`
}

// jsResult is one step's {ok} or {err: error-code}.
type jsResult struct {
	OK  any `json:"ok"`
	Err *struct {
		Tag string `json:"tag"`
		Val any    `json:"val"`
	} `json:"err"`
}

func (r jsResult) code() string {
	if r.Err == nil {
		return "ok"
	}
	return r.Err.Tag
}

func (r jsResult) obj() map[string]any { m, _ := r.OK.(map[string]any); return m }

type jsEnv struct {
	t   *testing.T
	h   *host.Host
	log interface{ String() string } // the host's log
}

// do runs steps as principal ("" for none) and returns each result and
// the instance that ran them.
func (j *jsEnv) do(principal string, steps ...jsStep) ([]jsResult, uint64) {
	j.t.Helper()
	ctx := context.Background()
	if principal != "" {
		ctx = host.WithPrincipal(ctx, principal)
	}
	in, _ := json.Marshal(map[string]any{"steps": steps})
	r, err := j.h.Call(ctx, "jscap", "do", string(in))
	if err != nil {
		j.t.Fatalf("do %s: %v", in, err)
	}
	var out []jsResult
	if err := json.Unmarshal([]byte(r.Output), &out); err != nil || len(out) != len(steps) {
		j.t.Fatalf("do %s = %s (%v)", in, r.Output, err)
	}
	return out, r.Instance
}

// one runs a single call that must answer with code ("ok" or an
// error-code tag) and returns it.
func (j *jsEnv) one(principal, code string, fn string, args ...any) jsResult {
	j.t.Helper()
	r, _ := j.do(principal, jsStep{Fn: fn, Args: args})
	if r[0].code() != code {
		j.t.Fatalf("%s(%v) as %q = %+v %v, want %s", fn, args, principal, r[0].OK, r[0].Err, code)
	}
	return r[0]
}

func shReq(script string) map[string]any {
	return map[string]any{"cmd": "/bin/sh", "args": []string{"-c", script}}
}

// jsWASI: with componentize-js's WASI features the guest's clocks,
// random and console go through the host's wasip2 (real time, a CSPRNG,
// the capsule's log).
func jsWASI(j *jsEnv) {
	before := time.Now().UnixMilli()
	r, err := j.h.Call(host.WithPrincipal(context.Background(), "alice"), "jscap", "wasi", `{}`)
	if err != nil {
		j.t.Fatal(err)
	}
	var out struct {
		Now    int64  `json:"now"`
		Random string `json:"random"`
		Again  string `json:"again"`
	}
	if err := json.Unmarshal([]byte(r.Output), &out); err != nil {
		j.t.Fatalf("wasi = %s: %v", r.Output, err)
	}
	if out.Now < before-1000 || out.Now > time.Now().UnixMilli()+1000 {
		j.t.Errorf("Date.now() = %d, host clock %d", out.Now, before)
	}
	if len(out.Random) != 32 || out.Random == out.Again || out.Random == strings.Repeat("0", 32) {
		j.t.Errorf("crypto.getRandomValues: %q then %q", out.Random, out.Again)
	}
	// console.log is wasi:cli/stdout, which goes to the capsule's log.
	pollJS(j.t, func() bool { return strings.Contains(j.log.String(), "wasi tool: hello from js") })
}

func newJSEnv(t *testing.T, wasi bool) *jsEnv {
	t.Helper()
	comp := jsComponent(t, wasi)
	e := newHost(t, func(c *host.Config) { c.CallTimeout = 30 * time.Second })
	if wasi {
		wasiImports(t, comp)
	}
	c, err := e.h.Load(context.Background(), capsuleDir(t, "jscap", comp, jscapManifest))
	if refusedByEngine(t, err) {
		t.Skip("components are refused under this engine (ErrLinkUnsupported, checked)")
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.Stats().Idle >= 2 })
	return &jsEnv{t: t, h: e.h, log: e.log}
}

// forged is a well-formed ID no process has.
var forged = strings.Repeat("a", 52)

// TestJSContract drives every capsule:process@1.1.0 function and
// process-handle method from the JS guest, with the typed error of each
// bad input: a forged ID, another principal's ID, a bad cursor, options
// out of range, a call without a principal.
func TestJSContract(t *testing.T) {
	for _, wasi := range []bool{false, true} {
		t.Run(map[bool]string{false: "pure", true: "wasi"}[wasi], func(t *testing.T) { jsContract(t, wasi) })
	}
}

func jsContract(t *testing.T, wasi bool) {
	j := newJSEnv(t, wasi)
	if wasi {
		t.Run("wasi", func(t *testing.T) { jsWASI(j.with(t)) })
	}
	t.Run("spawn", func(t *testing.T) { jsSpawn(j.with(t)) })
	t.Run("handle", func(t *testing.T) { jsHandle(j.with(t)) })
	t.Run("persistent", func(t *testing.T) { jsPersistent(j.with(t)) })
	t.Run("stop-signal-events", func(t *testing.T) { jsStopSignalEvents(j.with(t)) })
	t.Run("bad-input", func(t *testing.T) { jsBadInput(j.with(t)) })
}

func (j *jsEnv) with(t *testing.T) *jsEnv { return &jsEnv{t: t, h: j.h, log: j.log} }

func jsSpawn(j *jsEnv) {
	r := j.one("alice", "ok", "spawn", map[string]any{"cmd": "/bin/sh", "args": []string{"-c", `cat; printf %s "$FOO" >&2; exit 3`},
		"stdin": "from stdin", "env": [][]string{{"FOO", "bar baz"}}}).obj()
	if r["stdout"] != "from stdin" || r["stderr"] != "bar baz" || r["exit"].(map[string]any)["exitCode"] != 3.0 || r["truncated"] != false {
		j.t.Errorf("spawn = %v", r)
	}
	req := shReq("sleep 10")
	req["timeoutMs"] = 300
	if r = j.one("alice", "ok", "spawn", req).obj(); r["exit"].(map[string]any)["signal"] != 9.0 {
		j.t.Errorf("spawn past its timeout = %v", r)
	}
	tests := []struct {
		name string
		req  map[string]any
		code string
	}{
		{"command outside exec", map[string]any{"cmd": "/usr/bin/env"}, "capability-denied"},
		{"cwd escaping", map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "true"}, "cwd": "../outside"}, "boundary-escape"},
		{"loader variable", map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "true"}, "env": [][]string{{"LD_PRELOAD", "x"}}}, "invalid-input"},
	}
	for _, tc := range tests {
		if e := j.one("alice", tc.code, "spawn", tc.req); e.Err.Val == nil {
			j.t.Errorf("%s: %s without a message", tc.name, tc.code)
		}
	}
}

// jsHandle: spawn-background and every handle method, then drop.
func jsHandle(j *jsEnv) {
	r, _ := j.do("alice",
		jsStep{Fn: "spawn-background", Args: []any{map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "exec cat"}, "stdin": "abc"}}, As: "h"},
		jsStep{Fn: "h.os-pid"},
		jsStep{Fn: "h.write-stdin", Args: []any{"more"}},
		jsStep{Fn: "h.close-stdin"},
		jsStep{Fn: "h.close-stdin"}, // idempotent
		jsStep{Fn: "h.wait-with-output", Args: []any{5000}},
		jsStep{Fn: "h.read-logs"},
		jsStep{Fn: "h.wait", Args: []any{1000}},
		jsStep{Fn: "h.drop"},
	)
	for i, x := range r {
		if x.code() != "ok" {
			j.t.Errorf("step %d: %v", i, x.Err)
		}
	}
	if pid, _ := r[1].OK.(float64); pid <= 1 {
		j.t.Errorf("os-pid = %v", r[1].OK)
	}
	if r[2].OK != 4.0 {
		j.t.Errorf("write-stdin = %v", r[2].OK)
	}
	if wo := r[5].obj(); wo["stdout"] != "abcmore" || wo["exit"].(map[string]any)["exitCode"] != 0.0 {
		j.t.Errorf("wait-with-output = %v", wo)
	}
	if logs := r[6].obj(); logs["running"] != false || logs["exit"] == nil {
		j.t.Errorf("read-logs after exit = %v", logs)
	}
	r, _ = j.do("alice",
		jsStep{Fn: "spawn-background", Args: []any{shReq("sleep 30")}, As: "h"},
		jsStep{Fn: "h.wait", Args: []any{50}},
		jsStep{Fn: "h.signal", Args: []any{"usr1"}},
		jsStep{Fn: "h.wait", Args: []any{5000}},
		jsStep{Fn: "spawn-background", Args: []any{shReq("sleep 30")}, As: "k"},
		jsStep{Fn: "k.kill"},
		jsStep{Fn: "k.drop"},
		jsStep{Fn: "h.drop"},
	)
	if r[1].code() != "wait-timeout" || r[3].obj()["signal"] != 10.0 || r[5].obj()["signal"] != 9.0 || r[6].code() != "ok" || r[7].code() != "ok" {
		j.t.Errorf("signal/kill on handles = %+v", r)
	}
}

// jsPersistent: spawn on one instance, read with cursors on another,
// write stdin, status, list, attach, close, wait, stop, release; and
// another principal gets no-such-process from every function.
func jsPersistent(j *jsEnv) {
	sp := j.one("alice", "ok", "spawn-persistent", shReq(`echo ready; while read l; do echo "got:$l"; done; echo bye >&2`),
		map[string]any{"label": "echoer", "keepStdinOpen": true})
	id, _ := sp.OK.(string)
	if len(id) != 52 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		j.t.Fatalf("id %q is not 52 base32 characters", id)
	}
	_, i1 := j.do("alice", jsStep{Fn: "status", Args: []any{id}})
	var chunk map[string]any
	var i2 uint64
	pollJS(j.t, func() bool {
		var r []jsResult
		r, i2 = j.do("alice", jsStep{Fn: "read-since", Args: []any{id, "stdout", nil, 1024}})
		chunk = r[0].obj()
		return chunk["data"] == "ready\n" && i2 != i1
	})
	if chunk["eof"] != false || chunk["bytesDropped"] != 0.0 {
		j.t.Errorf("read-since = %v", chunk)
	}
	if n := j.one("alice", "ok", "write-stdin", id, "one\ntwo\n").OK; n != 8.0 {
		j.t.Errorf("write-stdin = %v", n)
	}
	var next map[string]any
	pollJS(j.t, func() bool {
		r, _ := j.do("alice", jsStep{Fn: "read-since", Args: []any{id, "stdout", chunk["next"], 1024}})
		next = r[0].obj()
		return strings.Contains(next["data"].(string), "got:two")
	})
	if next["data"] != "got:one\ngot:two\n" {
		j.t.Errorf("read-since from the cursor = %q", next["data"])
	}
	info := j.one("alice", "ok", "status", id).obj()
	if info["id"] != id || info["label"] != "echoer" || info["phase"] != "running" || info["stdinOpen"] != true || info["osPid"] == nil {
		j.t.Errorf("status = %v", info)
	}
	if many, _ := j.one("alice", "ok", "status-many", []string{id, forged}).OK.([]any); len(many) != 1 {
		j.t.Errorf("status-many = %v", many)
	}
	if l, _ := j.one("alice", "ok", "list-processes", "echo").OK.([]any); len(l) != 1 {
		j.t.Errorf("list-processes(echo) = %v", l)
	}
	if l, _ := j.one("alice", "ok", "list-processes", "nomatch").OK.([]any); len(l) != 0 {
		j.t.Errorf("list-processes(nomatch) = %v", l)
	}
	noSuchProcess(j, "bob", id)
	if l, _ := j.one("bob", "ok", "list-processes", nil).OK.([]any); len(l) != 0 {
		j.t.Errorf("bob lists %v", l)
	}
	att, _ := j.do("alice",
		jsStep{Fn: "attach", Args: []any{id}, As: "h"},
		jsStep{Fn: "h.write-stdin", Args: []any{"three\n"}},
		jsStep{Fn: "h.wait", Args: []any{100}},
		jsStep{Fn: "h.wait"}, // unbounded on an attached handle
		jsStep{Fn: "h.os-pid"},
		jsStep{Fn: "h.read-logs"},
		jsStep{Fn: "h.drop"}, // detaches
	)
	if att[0].OK != "<handle>" || att[1].OK != 6.0 || att[2].code() != "wait-timeout" || att[3].code() != "invalid-input" ||
		att[4].code() != "ok" || att[5].code() != "ok" || att[6].code() != "ok" {
		j.t.Errorf("attached handle = %+v", att)
	}
	if info = j.one("alice", "ok", "status", id).obj(); info["phase"] != "running" {
		j.t.Errorf("dropping an attached handle changed the process: %v", info)
	}
	j.one("alice", "invalid-input", "release", id) // still running
	j.one("alice", "ok", "close-stdin", id)
	j.one("alice", "ok", "close-stdin", id) // idempotent
	if ex := j.one("alice", "ok", "wait", id, 5000).obj(); ex["exitCode"] != 0.0 {
		j.t.Errorf("exit after close-stdin = %v", ex)
	}
	if st := j.one("alice", "ok", "read-since", id, "stderr", nil, 100).obj(); st["data"] != "bye\n" || st["eof"] != true {
		j.t.Errorf("stderr = %v", st)
	}
	if logs := j.one("alice", "ok", "read-logs", id).obj(); logs["running"] != false || logs["exit"] == nil {
		j.t.Errorf("read-logs after exit = %v", logs)
	}
	if ex := j.one("alice", "ok", "stop", id, 100).obj(); ex["exitCode"] != 0.0 {
		j.t.Errorf("stop after exit = %v", ex)
	}
	j.one("alice", "ok", "release", id)
	j.one("alice", "ok", "release", id) // idempotent for the owner
	j.one("alice", "no-such-process", "status", id)
}

// noSuchProcess: every function taking an ID answers no-such-process to
// principal for id.
func noSuchProcess(j *jsEnv, principal, id string) {
	j.t.Helper()
	calls := []jsStep{
		{Fn: "status", Args: []any{id}},
		{Fn: "read-since", Args: []any{id, "stdout", nil, 10}},
		{Fn: "read-logs", Args: []any{id}},
		{Fn: "write-stdin", Args: []any{id, "x"}},
		{Fn: "close-stdin", Args: []any{id}},
		{Fn: "signal", Args: []any{id, "term"}},
		{Fn: "wait", Args: []any{id, 10}},
		{Fn: "stop", Args: []any{id, nil}},
		{Fn: "release", Args: []any{id}},
		{Fn: "attach", Args: []any{id}},
	}
	r, _ := j.do(principal, calls...)
	for i, x := range r {
		if x.code() != "no-such-process" {
			j.t.Errorf("%s %s(%.8s…) = %v %v, want no-such-process", principal, calls[i].Fn, id, x.OK, x.Err)
		}
	}
	if many, _ := j.one(principal, "ok", "status-many", []string{id}).OK.([]any); len(many) != 0 {
		j.t.Errorf("%s status-many = %v", principal, many)
	}
}

func jsStopSignalEvents(j *jsEnv) {
	id, _ := j.one("alice", "ok", "spawn-persistent", shReq("sleep 30"), nil).OK.(string)
	j.one("alice", "wait-timeout", "wait", id, 50)
	j.one("alice", "ok", "signal", id, "stop")
	j.one("alice", "ok", "signal", id, "cont")
	if ex := j.one("alice", "ok", "stop", id, 1000).obj(); ex["signal"] != 15.0 {
		j.t.Errorf("stop = %v", ex)
	}
	if info := j.one("alice", "ok", "status", id).obj(); info["phase"] != "exited" || info["exitReason"] != "stopped" {
		j.t.Errorf("status after stop = %v", info)
	}
	var cursor float64
	seen := false
	pollJS(j.t, func() bool {
		b := j.one("alice", "ok", "poll-events", cursor, 100, 200).obj()
		evs, _ := b["events"].([]any)
		for _, ev := range evs {
			e := ev.(map[string]any)
			k := e["kind"].(map[string]any)
			if e["id"] == id && k["tag"] == "exited" && k["val"].(map[string]any)["reason"] == "stopped" {
				seen = true
			}
		}
		cursor = b["next"].(float64)
		return seen
	})
	if b := j.one("bob", "ok", "poll-events", 0, 100, 0).obj(); len(b["events"].([]any)) != 0 {
		j.t.Errorf("bob sees events %v", b["events"])
	}
	j.one("alice", "ok", "release", id)
}

func jsBadInput(j *jsEnv) {
	noSuchProcess(j, "alice", forged)
	noSuchProcess(j, "alice", "not an id")
	id, _ := j.one("alice", "ok", "spawn-persistent", shReq("echo hi; sleep 30"), map[string]any{"label": "bad-input"}).OK.(string)
	defer j.one("alice", "ok", "stop", id, 100)
	// A malformed cursor is indistinguishable from a foreign ID.
	for _, cur := range []string{"garbage", "", strings.Repeat("9", 40)} {
		j.one("alice", "no-such-process", "read-since", id, "stdout", cur, 10)
	}
	j.one("alice", "closed", "write-stdin", id, "x") // stdin not kept open
	tests := []struct {
		name string
		opts map[string]any
	}{
		{"idle timeout 0", map[string]any{"idleTimeoutMs": 0}},
		{"control character in label", map[string]any{"label": "a\nb"}},
		{"label over 128 bytes", map[string]any{"label": strings.Repeat("x", 129)}},
	}
	for _, tc := range tests {
		if e := j.one("alice", "invalid-input", "spawn-persistent", shReq("true"), tc.opts); e.Err.Val == nil {
			j.t.Errorf("%s: invalid-input without a message", tc.name)
		}
	}
	j.one("alice", "capability-denied", "spawn-persistent", map[string]any{"cmd": "/usr/bin/env"}, nil)
	// The owner-fallback principal (a call without one) cannot persist.
	j.one("", "persist-unsupported", "spawn-persistent", shReq("true"), nil)
	j.one("alice", "invalid-input", "poll-events", 1<<40, 10, 0) // a cursor ahead of the event log
}

// pollJS repeats cond until it holds, for at most 15 s.
func pollJS(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wasiImports: the WASI build imports clocks, random and the filesystem
// (served with no preopens: every descriptor call is a WASI error, see
// host/internal/wasip2), and the pure build none of them.
func wasiImports(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := component.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, im := range c.Imports {
		names = append(names, im.Name)
	}
	all := strings.Join(names, " ")
	for _, want := range []string{"wasi:clocks/wall-clock@0.2", "wasi:random/random@0.2", "wasi:filesystem/preopens@0.2", "capsule:process/host@1.1.0"} {
		if !strings.Contains(all, want) {
			t.Errorf("the WASI build does not import %s (imports %s)", want, all)
		}
	}
}

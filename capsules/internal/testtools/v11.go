package testtools

import (
	"errors"
	"fmt"

	"github.com/capsule-host/capsule-host/capsules/sdk/process"
)

// h11 adapts a 1.1.0 handle to handleAPI.
type h11 struct{ *process.Handle }

func (h h11) Signal(name string) error {
	s, ok := process.ParseSignal(name)
	if !ok {
		return fmt.Errorf("invalid input: %q is not a signal (term, hup, int, usr1, usr2, stop, cont, kill)", name)
	}
	return h.Handle.Signal(s)
}

type idIn struct {
	ID string `json:"id"`
}

// Tier11 is what the 1.1.0 tools call for the four functions whose types
// 1.2.0 changed (persist-options and process-info grew fields): package
// process's for a 1.1.0 capsule (Process11), package terminal's 1.2.0
// ones for a 1.2.0 capsule. A component carries one version of each
// function: wit-component would lower a module's 1.1.0 calls of these
// with 1.2.0's layouts, and the host refuses such a component.
type Tier11 struct {
	SpawnPersistent func(process.SpawnRequest, process.PersistOptions) (process.ID, error)
	ListProcesses   func(label *string) (any, error)
	Status          func(process.ID) (any, error)
	StatusMany      func([]process.ID) (any, error)
}

// Process11 is the tier of package process (capsule:process/host@1.1.0).
func Process11() Tier11 {
	return Tier11{
		SpawnPersistent: process.SpawnPersistent,
		ListProcesses:   func(l *string) (any, error) { return process.ListProcesses(l) },
		Status:          func(id process.ID) (any, error) { return process.Status(id) },
		StatusMany:      func(ids []process.ID) (any, error) { return process.StatusMany(ids) },
	}
}

// RegisterV11 registers one tool per capsule:process@1.1.0 function, plus the basics (echo, fail, panic),
// calling tier for the functions 1.2.0 changed.
// funclen: a flat table, one reg per contract function; split, it would change the committed testcap.wasm.
func RegisterV11(tier Tier11) {
	registerBasics()
	reg("spawn", "spawn(request): runs to completion.", reqSchema,
		func(r process.SpawnRequest) (any, error) { return reply(process.Spawn(r)) })
	reg("spawn_background_ops", "spawn-background(request), then the handle ops in order, then drop (unless keep_handle).",
		opsSchema(`"request"`), func(in opsIn) (any, error) {
			h, err := process.SpawnBackground(in.Request)
			if err != nil {
				return reply(nil, err)
			}
			raw := h.Raw() // before runOps: Drop zeroes it
			res, err := runOps(h11{h}, in.Ops, in.KeepHandle)
			return reply(map[string]any{"handle": raw, "results": res}, err)
		})
	reg("spawn_persistent", "spawn-persistent(request, options) -> {ok: id}.",
		`{"type":"object","additionalProperties":false,"required":["request"],"properties":{"request":`+reqSchema+`,"options":{"type":"object"}}}`,
		func(in struct {
			Request process.SpawnRequest   `json:"request"`
			Options process.PersistOptions `json:"options"`
		}) (any, error) {
			return reply(tier.SpawnPersistent(in.Request, in.Options))
		})
	reg("attach_ops", "attach(id), then the handle ops in order, then drop (detach) unless keep_handle.",
		opsSchema(`"id"`), func(in opsIn) (any, error) {
			h, err := process.Attach(in.ID)
			if err != nil {
				return reply(nil, err)
			}
			raw := h.Raw() // before runOps: Drop zeroes it
			res, err := runOps(h11{h}, in.Ops, in.KeepHandle)
			return reply(map[string]any{"handle": raw, "results": res}, err)
		})
	reg("list_processes", "list-processes(label-filter).", obj(``, `"label":{"type":"string"}`),
		func(in struct {
			Label *string `json:"label"`
		}) (any, error) {
			return reply(tier.ListProcesses(in.Label))
		})
	reg("status", "status(id).", obj(`"id"`, idProp),
		func(in idIn) (any, error) { return reply(tier.Status(in.ID)) })
	reg("status_many", "status-many(ids).", obj(`"ids"`, `"ids":{"type":"array","items":{"type":"string"}}`),
		func(in struct {
			IDs []string `json:"ids"`
		}) (any, error) {
			return reply(tier.StatusMany(in.IDs))
		})
	reg("read_since", "read-since(id, stream, cursor, max-bytes); data is base64.",
		obj(`"id","stream","max"`, idProp, `"stream":{"enum":["stdout","stderr"]}`, `"cursor":{"type":"string"}`,
			`"max":{"type":"integer","minimum":0,"maximum":4294967295}`),
		func(in struct {
			ID     string            `json:"id"`
			Stream process.LogStream `json:"stream"`
			Cursor *string           `json:"cursor"`
			Max    uint32            `json:"max"`
		}) (any, error) {
			return reply(process.ReadSince(in.ID, in.Stream, in.Cursor, in.Max))
		})
	reg("read_logs", "read-logs(id): draining; stdout/stderr are base64.", obj(`"id"`, idProp),
		func(in idIn) (any, error) { return reply(process.ReadLogs(in.ID)) })
	reg("write_stdin", "write-stdin(id, data); data is text, or data_b64 bytes.",
		obj(`"id"`, idProp, `"data":{"type":"string"}`, `"data_b64":{"type":"string","contentEncoding":"base64"}`),
		func(in struct {
			ID      string `json:"id"`
			Data    string `json:"data"`
			DataB64 []byte `json:"data_b64"`
		}) (any, error) {
			d := []byte(in.Data)
			if in.DataB64 != nil {
				d = in.DataB64
			}
			return reply(process.WriteStdin(in.ID, d))
		})
	reg("close_stdin", "close-stdin(id).", obj(`"id"`, idProp),
		func(in idIn) (any, error) { return reply(nil, process.CloseStdin(in.ID)) })
	reg("signal", "signal(id, sig).", obj(`"id","sig"`, idProp,
		`"sig":{"enum":["term","hup","int","usr1","usr2","stop","cont","kill"]}`),
		func(in struct {
			ID  string         `json:"id"`
			Sig process.Signal `json:"sig"`
		}) (any, error) {
			return reply(nil, process.SendSignal(in.ID, in.Sig))
		})
	reg("wait", "wait(id, timeout-ms).", obj(`"id","timeout_ms"`, idProp, `"timeout_ms":{"type":"integer","minimum":0}`),
		func(in struct {
			ID        string `json:"id"`
			TimeoutMS uint64 `json:"timeout_ms"`
		}) (any, error) {
			return reply(process.Wait(in.ID, in.TimeoutMS))
		})
	reg("stop", "stop(id, grace-ms).", obj(`"id"`, idProp, `"grace_ms":{"type":"integer","minimum":0}`),
		func(in struct {
			ID      string  `json:"id"`
			GraceMS *uint64 `json:"grace_ms"`
		}) (any, error) {
			return reply(process.Stop(in.ID, in.GraceMS))
		})
	reg("release", "release(id).", obj(`"id"`, idProp),
		func(in idIn) (any, error) { return reply(nil, process.Release(in.ID)) })
	reg("poll_events", "poll-events(cursor, max, timeout-ms).",
		obj(`"cursor","max","timeout_ms"`, `"cursor":{"type":"integer","minimum":0}`,
			`"max":{"type":"integer","minimum":0,"maximum":4294967295}`, `"timeout_ms":{"type":"integer","minimum":0}`),
		func(in struct {
			Cursor    uint64 `json:"cursor"`
			Max       uint32 `json:"max"`
			TimeoutMS uint64 `json:"timeout_ms"`
		}) (any, error) {
			return reply(process.PollEvents(in.Cursor, in.Max, in.TimeoutMS))
		})
}

// RegisterBench registers bench_status: n status calls of one ID in a
// loop inside one tool call, so a benchmark can isolate the cost of an
// import round trip (SDK lowering and lifting plus the host function)
// from the cost of a tool call.
func RegisterBench() {
	reg("bench_status", "Calls status(id) n times; returns how many answered no-such-process.",
		obj(`"id","n"`, idProp, `"n":{"type":"integer","minimum":0,"maximum":1000000}`),
		func(in struct {
			ID string `json:"id"`
			N  int    `json:"n"`
		}) (any, error) {
			if in.N < 0 || in.N > 1_000_000 {
				return nil, fmt.Errorf("invalid input: n must be in [0, 1000000]")
			}
			missing := 0
			for range in.N {
				if _, err := process.Status(in.ID); errors.Is(err, process.ErrNoSuchProcess) {
					missing++
				}
			}
			return reply(missing, nil)
		})
}

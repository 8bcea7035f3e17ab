// Package testtools holds the tools of the conformance capsules: one tool
// per function of capsule:process@1.1.0 and @1.0.0, so host tests drive
// every import through real wasm. testcap registers both sets; testcap10
// only the 1.0.0 set (it imports nothing of 1.1.0).
//
// Every tool answers ok JSON: {"ok": <value>} when the contract call
// succeeded, {"error": {"code", "message", "written"}} when the host
// returned an error-code. An err result means the tool input was bad.
package testtools

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/capsule-host/capsule-host/capsules/sdk"
	"github.com/capsule-host/capsule-host/capsules/sdk/process"
)

// reply wraps a contract call's outcome.
func reply(v any, err error) (any, error) {
	if err != nil {
		var pe *process.Error
		if errors.As(err, &pe) {
			return map[string]any{"error": pe}, nil
		}
		return nil, err
	}
	return map[string]any{"ok": v}, nil
}

// reg registers a typed tool with a schema.
func reg[T any](name, desc, schema string, h func(T) (any, error)) {
	sdk.Register(sdk.Tool{Name: name, Description: desc, InputSchema: schema, Handler: sdk.Handle(h)})
}

// Schema fragments.
const (
	reqSchema = `{"type":"object","required":["cmd"],"additionalProperties":false,"properties":{
"cmd":{"type":"string"},"args":{"type":"array","items":{"type":"string"}},
"stdin":{"type":"string","contentEncoding":"base64"},
"env":{"type":"array","items":{"type":"object","required":["key","value"],"properties":{"key":{"type":"string"},"value":{"type":"string"}}}},
"cwd":{"type":"string"},"timeout_ms":{"type":"integer","minimum":0}}}`
	idProp   = `"id":{"type":"string"}`
	opSchema = `{"type":"object","required":["op"],"properties":{
"op":{"enum":["read_logs","write_stdin","close_stdin","signal","kill","wait","wait_with_output","os_pid","drop"]},
"data":{"type":"string"},"sig":{"type":"string"},"timeout_ms":{"type":"integer","minimum":0}}}`
)

func obj(required string, props ...string) string {
	s := `{"type":"object","additionalProperties":false,"required":[` + required + `],"properties":{`
	for i, p := range props {
		if i > 0 {
			s += ","
		}
		s += p
	}
	return s + "}}"
}

// Op is one handle operation of the *_ops tools.
type Op struct {
	Op        string  `json:"op"`
	Data      string  `json:"data"`
	Sig       string  `json:"sig"`
	TimeoutMS *uint64 `json:"timeout_ms"`
}

// handleAPI is what both tiers' handles offer (signals as WIT names).
type handleAPI interface {
	ReadLogs() (process.ReadLogsResult, error)
	WriteStdin([]byte) (uint32, error)
	CloseStdin() error
	Signal(string) error
	Kill() (process.ExitInfo, error)
	Wait(*uint64) (process.ExitInfo, error)
	WaitWithOutput(*uint64) (process.ProcessResult, error)
	OSPid() (uint32, error)
	Drop()
}

type opsIn struct {
	Request process.SpawnRequest `json:"request"`
	ID      string               `json:"id"`
	Ops     []Op                 `json:"ops"`
	// KeepHandle leaves the handle undropped at the end of the call, so a
	// test can check the instance reset reaps (or detaches) it.
	KeepHandle bool `json:"keep_handle"`
}

// runOps applies ops to h, one result per op ({"ok"} or {"error"}).
func runOps(h handleAPI, ops []Op, keep bool) ([]any, error) {
	out := make([]any, 0, len(ops))
	dropped := false
	for i, op := range ops {
		var v any
		var err error
		switch op.Op {
		case "read_logs":
			v, err = h.ReadLogs()
		case "write_stdin":
			v, err = h.WriteStdin([]byte(op.Data))
		case "close_stdin":
			err = h.CloseStdin()
		case "signal":
			err = h.Signal(op.Sig)
		case "kill":
			v, err = h.Kill()
		case "wait":
			v, err = h.Wait(op.TimeoutMS)
		case "wait_with_output":
			v, err = h.WaitWithOutput(op.TimeoutMS)
		case "os_pid":
			v, err = h.OSPid()
		case "drop":
			h.Drop()
			dropped = true
		default:
			return nil, fmt.Errorf("invalid input: ops[%d].op %q is not an operation", i, op.Op)
		}
		if dropped && i < len(ops)-1 {
			return nil, fmt.Errorf("invalid input: ops[%d]: drop must be the last operation", i)
		}
		r, rerr := reply(v, err)
		if rerr != nil {
			return nil, rerr
		}
		out = append(out, r)
	}
	if !dropped && !keep {
		h.Drop()
	}
	return out, nil
}

func opsSchema(head string) string {
	return `{"type":"object","additionalProperties":false,"required":[` + head + `,"ops"],"properties":{` +
		`"request":` + reqSchema + `,` + idProp + `,"keep_handle":{"type":"boolean"},` +
		`"ops":{"type":"array","items":` + opSchema + `}}}`
}

// Echo and failure tools, for SDK and host tests that need no process.
func registerBasics() {
	sdk.Register(sdk.Tool{Name: "echo", Description: "Returns its input.", InputSchema: `{"type":"object"}`,
		Handler: func(in json.RawMessage) (any, error) { return in, nil }})
	reg("fail", "Returns an err result with the given message.", obj(`"message"`, `"message":{"type":"string"}`),
		func(in struct {
			Message string `json:"message"`
		}) (any, error) {
			return nil, errors.New(in.Message)
		})
	reg("panic", "Panics in the handler (the SDK turns it into an err result).", `{"type":"object"}`,
		func(struct{}) (any, error) { panic("testcap: deliberate panic") })
}

// RegisterBasicsOnly registers echo, fail and panic (for capsules that do
// not call RegisterV11).
func RegisterBasicsOnly() { registerBasics() }

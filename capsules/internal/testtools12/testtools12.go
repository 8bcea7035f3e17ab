// Package testtools12 holds the tools testcap12 adds to testtools' 1.1.0
// set: one per function of capsule:process@1.2.0's terminal tier. It is a
// package of its own so that testcap and testcap10, which link testtools,
// stay byte-identical (they must not link the 1.2.0 bindings).
package testtools12

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/capsule-host/capsule-host/capsules/sdk"
	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/capsules/sdk/terminal"
)

// reply wraps a contract call's outcome as testtools does: {"ok": v}, or
// {"error": error-code} when the host returned one.
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

func reg[T any](name, desc, schema string, h func(T) (any, error)) {
	if !json.Valid([]byte(schema)) {
		panic("testtools12: the schema of " + name + " is not JSON")
	}
	sdk.Register(sdk.Tool{Name: name, Description: desc, InputSchema: schema, Handler: sdk.Handle(h)})
}

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

const idProp = `"id":{"type":"string"}`

type idIn struct {
	ID string `json:"id"`
}

// condIn is a wait-condition as JSON: kind is the WIT case name.
type condIn struct {
	Kind    string            `json:"kind"`
	Stream  process.LogStream `json:"stream"`
	Cursor  *string           `json:"cursor"`
	Regex   string            `json:"regex"`
	QuietMS uint64            `json:"quiet_ms"`
}

func (c condIn) condition() (terminal.Condition, error) {
	switch c.Kind {
	case "output-matches":
		return terminal.Match(c.Stream, c.Cursor, c.Regex), nil
	case "quiet-ms":
		return terminal.QuietFor(c.QuietMS), nil
	case "input-wait":
		return terminal.WaitInput(), nil
	case "exited":
		return terminal.WaitExit(), nil
	}
	return terminal.Condition{}, fmt.Errorf("invalid input: condition.kind %q is not output-matches, quiet-ms, input-wait or exited", c.Kind)
}

type textIn struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

const keysProp = `"keys":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"text":{"type":"string"}}}}`

// Register registers one tool per function capsule:process@1.2.0 adds,
// plus status@1.2.0 and spawn-persistent with a terminal.
func Register() {
	reg("term_spawn", "spawn-persistent@1.2.0(request, options with terminal) -> {ok: id}.",
		`{"type":"object","additionalProperties":false,"required":["request","terminal"],"properties":{"request":{"type":"object"},"options":{"type":"object"},"terminal":{"type":"object"}}}`,
		func(in struct {
			Request  process.SpawnRequest   `json:"request"`
			Options  process.PersistOptions `json:"options"`
			Terminal terminal.Spec          `json:"terminal"`
		}) (any, error) {
			return reply(terminal.Spawn(in.Request, in.Options, in.Terminal))
		})
	reg("term_send_keys", "send-keys(id, keys).", obj(`"id","keys"`, idProp, keysProp),
		func(in struct {
			ID   string         `json:"id"`
			Keys []terminal.Key `json:"keys"`
		}) (any, error) {
			return reply(terminal.SendKeys(in.ID, in.Keys))
		})
	reg("term_paste", "paste(id, text).", obj(`"id","text"`, idProp, `"text":{"type":"string"}`),
		func(in textIn) (any, error) { return reply(terminal.Paste(in.ID, in.Text)) })
	reg("term_submit", "submit(id, text).", obj(`"id","text"`, idProp, `"text":{"type":"string"}`),
		func(in textIn) (any, error) { return reply(terminal.Submit(in.ID, in.Text)) })
	reg("term_resize", "resize(id, rows, cols).", obj(`"id","rows","cols"`, idProp, `"rows":{"type":"integer"}`, `"cols":{"type":"integer"}`),
		func(in struct {
			ID   string `json:"id"`
			Rows uint16 `json:"rows"`
			Cols uint16 `json:"cols"`
		}) (any, error) {
			return reply(nil, terminal.Resize(in.ID, in.Rows, in.Cols))
		})
	reg("term_snapshot", "snapshot(id, scrollback).", obj(`"id"`, idProp, `"scrollback":{"type":"integer","minimum":0}`),
		func(in struct {
			ID         string `json:"id"`
			Scrollback uint32 `json:"scrollback"`
		}) (any, error) {
			return reply(terminal.Screen(in.ID, in.Scrollback))
		})
	reg("wait_for", "wait-for(id, condition, timeout-ms).", obj(`"id","condition","timeout_ms"`, idProp,
		`"condition":{"type":"object"}`, `"timeout_ms":{"type":"integer","minimum":0}`),
		func(in struct {
			ID        string `json:"id"`
			Condition condIn `json:"condition"`
			TimeoutMS uint64 `json:"timeout_ms"`
		}) (any, error) {
			c, err := in.Condition.condition()
			if err != nil {
				return nil, err
			}
			return reply(terminal.WaitFor(in.ID, c, in.TimeoutMS))
		})
	reg("status12", "status@1.2.0(id).", obj(`"id"`, idProp),
		func(in idIn) (any, error) { return reply(terminal.Status(in.ID)) })
}

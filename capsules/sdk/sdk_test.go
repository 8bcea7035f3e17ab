package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/wire"
)

type echoIn struct {
	Msg   string `json:"msg"`
	Times int    `json:"times"`
}

func (e echoIn) Validate() error {
	if e.Msg == "" {
		return errors.New(`"msg" is required`)
	}
	return nil
}

func init() {
	panicLog = io.Discard
	Register(Tool{Name: "echo", Description: "echoes", InputSchema: `{"type":"object"}`,
		Handler: Handle(func(in echoIn) (any, error) {
			return map[string]any{"msg": strings.Repeat(in.Msg, max(in.Times, 1))}, nil
		})})
	Register(Tool{Name: "boom", Handler: func(json.RawMessage) (any, error) { panic("kaboom") }})
	Register(Tool{Name: "fail", Handler: func(json.RawMessage) (any, error) { return nil, errors.New("it failed") }})
	Register(Tool{Name: "raw", Handler: func(in json.RawMessage) (any, error) { return json.RawMessage(`{"a": [1, 2]}`), nil }})
	Register(Tool{Name: "raw_bad", Handler: func(json.RawMessage) (any, error) { return json.RawMessage(`{"a":`), nil }})
	// ValidJSON is passed on unscanned: the capsule vouches for it.
	Register(Tool{Name: "encoded", Handler: func(json.RawMessage) (any, error) { return ValidJSON(`{"a":1} trusted`), nil }})
}

func TestCall(t *testing.T) {
	tests := []struct {
		tool, input string
		ok          string
		errHas      string
	}{
		{"echo", `{"msg":"ab","times":2}`, `{"msg":"abab"}`, ""},
		{"echo", `{"msg":1}`, "", `field "msg" must be string`},
		{"echo", `{"msg":"a","extra":1}`, "", `unknown field "extra"`},
		{"echo", `{}`, "", `"msg" is required`},
		{"echo", `{"msg":"a"} {}`, "", "not valid JSON"},
		{"echo", `{"msg":`, "", "not valid JSON"},
		{"nope", `{}`, "", `unknown tool "nope" (this capsule has: boom, echo, encoded, fail, raw, raw_bad)`},
		{"raw", `{}`, `{"a": [1, 2]}`, ""},
		{"raw_bad", `{}`, "", "tool raw_bad returned invalid JSON"},
		{"encoded", `{}`, `{"a":1} trusted`, ""},
		{"boom", `{}`, "", "internal error (panic: kaboom)"},
		{"fail", `{}`, "", "it failed"},
	}
	for _, tt := range tests {
		ok, msg, isErr := Call(tt.tool, tt.input)
		if tt.errHas != "" {
			if !isErr || !strings.Contains(msg, tt.errHas) {
				t.Errorf("%s(%s) = %q/%q, want err containing %q", tt.tool, tt.input, ok, msg, tt.errHas)
			}
		} else if isErr || ok != tt.ok {
			t.Errorf("%s(%s) = %q/%q, want %q", tt.tool, tt.input, ok, msg, tt.ok)
		}
	}
}

// registerForTest registers tl for the test's length only, so that the
// tool list other tests see is init's, whatever ran before (-count=N).
func registerForTest(t *testing.T, tl Tool) {
	Register(tl)
	t.Cleanup(func() {
		i := byName[tl.Name]
		tools = append(tools[:i:i], tools[i+1:]...)
		delete(byName, tl.Name)
		for j := i; j < len(tools); j++ {
			byName[tools[j].Name] = j
		}
	})
}

func TestRegisterRejects(t *testing.T) {
	for _, tl := range []Tool{
		{Name: "Bad-Name", Handler: func(json.RawMessage) (any, error) { return nil, nil }},
		{Name: "echo", Handler: func(json.RawMessage) (any, error) { return nil, nil }},
		{Name: "nohandler"},
		{Name: "badschema", InputSchema: "{", Handler: func(json.RawMessage) (any, error) { return nil, nil }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", tl.Name)
				}
			}()
			Register(tl)
		}()
	}
}

// The export glue, playing the host: cabi_realloc the arguments, call,
// read result<string, string> from the returned pointer, post-return.
func TestExportGlue(t *testing.T) {
	put := func(v string) (uint32, uint32) {
		p := abi.Realloc(0, 0, 1, uint32(len(v)))
		abi.Incoming.Poke(p, []byte(v))
		return p, uint32(len(v))
	}
	np, nl := put("echo")
	ip, il := put(`{"msg":"hi"}`)
	rp := callExport(np, nl, ip, il)
	ret, ok := out.Load(rp, 12)
	if !ok {
		t.Fatal("return area not in the out scope")
	}
	l := abi.Lifter{M: out}
	if ret[0] != 0 || l.String(ret, 4, "ok") != `{"msg":"hi"}` || l.Err != nil {
		t.Errorf("call result disc %d err %v", ret[0], l.Err)
	}
	postReturn(rp)
	if _, ok := out.Load(rp, 12); ok {
		t.Error("post-return did not free the result")
	}

	np, nl = put("fail")
	ip, il = put(`{}`)
	rp = callExport(np, nl, ip, il)
	ret, _ = out.Load(rp, 12)
	if ret[0] != 1 || l.String(ret, 4, "err") != "it failed" {
		t.Errorf("err result disc %d", ret[0])
	}

	rp = describeExport()
	ret, _ = out.Load(rp, 8)
	specs := l.List(ret, 0, lToolSpec, "specs")
	if len(specs) != len(tools) || l.String(specs[1], 0, "name") != "boom" || l.String(specs[1], 16, "schema") != `{"type":"object"}` {
		t.Errorf("describe gave %d specs, err %v", len(specs), l.Err)
	}

	// Invalid UTF-8 from the host traps (panics), as the Canonical ABI does.
	np, nl = put("\xff")
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "invalid UTF-8") {
			t.Errorf("panic = %v", r)
		}
	}()
	callExport(np, nl, np, nl)
}

// A coded error, and a process error anywhere in the chain, become the
// contract's typed err string; any other error stays text.
func TestTypedToolErrors(t *testing.T) {
	registerForTest(t, Tool{Name: "coded_err", Handler: func(json.RawMessage) (any, error) { return nil, Errorf("not-ready", "warming up %d", 3) }})
	registerForTest(t, Tool{Name: "proc_err", Handler: func(json.RawMessage) (any, error) {
		return nil, fmt.Errorf("status: %w", &wire.Error{Code: wire.ErrNoSuchProcess, Message: "gone"})
	}})
	registerForTest(t, Tool{Name: "plain_err", Handler: func(json.RawMessage) (any, error) { return nil, errors.New(`{"code":"x"} is text here`) }})
	for _, c := range []struct{ tool, want string }{
		{"coded_err", `{"code":"not-ready","message":"warming up 3"}`},
		{"proc_err", `{"code":"no-such-process","message":"status: no-such-process: gone"}`},
		{"plain_err", `{"code":"x"} is text here`},
	} {
		if _, msg, isErr := Call(c.tool, "{}"); !isErr || msg != c.want {
			t.Errorf("%s: %q (error %v), want %q", c.tool, msg, isErr, c.want)
		}
	}
}

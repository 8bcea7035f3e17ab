package process

import (
	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox/terminal"
)

// The functions 1.2.0 adds: the terminal tier and wait-for. Their errors
// are the registry's classes through the same errorCases column as 1.1.0
// (1.2.0 adds no error-code case).

// terminalDefs are the functions 1.2.0 adds.
func terminalDefs(v *version) []def {
	id := cabi.F("id", tProcessID)
	text := cabi.F("text", cabi.String)
	return []def{
		{cabi.NewFunc("send-keys", res(v, cabi.U32), id, cabi.F("keys", cabi.List(tKey))), false, sendKeys},
		{cabi.NewFunc("paste", res(v, cabi.U32), id, text), false, paste},
		{cabi.NewFunc("submit", res(v, cabi.U32), id, text), false, submit},
		{cabi.NewFunc("resize", res(v, nil), id, cabi.F("rows", cabi.U16), cabi.F("cols", cabi.U16)), false, resize},
		{cabi.NewFunc("snapshot", res(v, tScreenSnapshot), id, cabi.F("scrollback", cabi.U32)), false, snapshot},
		{cabi.NewFunc("wait-for", res(v, tWaitForResult), id, cabi.F("condition", tWaitCondition), cabi.F("timeout-ms", cabi.U64)), false, waitFor},
	}
}

// sendKeys serves
//
//	send-keys: func(id: process-id, keys: list<key>) -> result<u32, error-code>
//	core: (func (param i32 i32 id) (param i32 i32 keys) (param i32 retptr))
func sendKeys(c *call, a []cabi.Value) cabi.Value {
	n, err := c.reg.SendKeys(c.ctx, a[0].(string), keyList(a[1]))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(uint32(n))
}

// paste serves
//
//	paste: func(id: process-id, text: string) -> result<u32, error-code>
//	core: (func (param i32 i32 id) (param i32 i32 text) (param i32 retptr))
func paste(c *call, a []cabi.Value) cabi.Value { return pasteOrSubmit(c, a, false) }

// submit serves
//
//	submit: func(id: process-id, text: string) -> result<u32, error-code>
//	core: (func (param i32 i32 id) (param i32 i32 text) (param i32 retptr))
func submit(c *call, a []cabi.Value) cabi.Value { return pasteOrSubmit(c, a, true) }

func pasteOrSubmit(c *call, a []cabi.Value, enter bool) cabi.Value {
	n, err := c.reg.Paste(c.ctx, a[0].(string), []byte(a[1].(string)), enter)
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(uint32(n))
}

// resize serves
//
//	resize: func(id: process-id, rows: u16, cols: u16) -> result<_, error-code>
//	core: (func (param i32 i32 id) (param i32 rows) (param i32 cols) (param i32 retptr))
func resize(c *call, a []cabi.Value) cabi.Value {
	if err := c.reg.Resize(c.ctx, a[0].(string), a[1].(uint16), a[2].(uint16)); err != nil {
		return c.fail(err)
	}
	return cabi.Ok(nil)
}

// snapshot serves
//
//	snapshot: func(id: process-id, scrollback: u32) -> result<screen-snapshot, error-code>
//	core: (func (param i32 i32 id) (param i32 scrollback) (param i32 retptr))
func snapshot(c *call, a []cabi.Value) cabi.Value {
	s, err := c.reg.Snapshot(c.ctx, a[0].(string), a[1].(uint32))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok(screenSnapshot(s))
}

// waitFor serves
//
//	wait-for: func(id: process-id, condition: wait-condition, timeout-ms: u64) -> result<wait-for-result, error-code>
//	core: (func (param i32 i32 id) (param i32 i64 i32 i32 i32 i32 i32 condition) (param i64 timeout-ms) (param i32 retptr))
//
// wait-condition flattens to its discriminant and the join of its cases:
// output-match's six i32 with quiet-ms's i64 in the first slot.
func waitFor(c *call, a []cabi.Value) cabi.Value {
	r, err := c.reg.WaitFor(c.ctx, a[0].(string), waitCondition(a[1]), msDur(a[2].(uint64)))
	if err != nil {
		return c.fail(err)
	}
	return cabi.Ok([]cabi.Value{uint32(r.Fired), r.Cursor})
}

// keyList lifts list<key>: case 0 is a tmux name, case 1 literal text.
func keyList(v cabi.Value) []terminal.Key {
	vs := v.([]cabi.Value)
	out := make([]terminal.Key, len(vs))
	for i, k := range vs {
		kv := k.(cabi.Variant)
		if kv.Case == 0 {
			out[i].Name = kv.Payload.(string)
		} else {
			out[i].Text = kv.Payload.(string)
		}
	}
	return out
}

// waitCondition lifts wait-condition; its cases are registry.WaitKind's
// values in order.
func waitCondition(v cabi.Value) registry.WaitCondition {
	o := v.(cabi.Variant)
	cond := registry.WaitCondition{Kind: registry.WaitKind(o.Case)}
	switch cond.Kind {
	case registry.WaitOutput:
		m := o.Payload.([]cabi.Value)
		cond.Stream = registry.Stream(m[0].(uint32))
		cond.Cursor = optString(m[1])
		cond.Regex = m[2].(string)
	case registry.WaitQuiet:
		cond.Quiet = msDur(o.Payload.(uint64))
	}
	return cond
}

func stringsValue(ss []string) []cabi.Value {
	out := make([]cabi.Value, len(ss))
	for i, s := range ss {
		out[i] = utf8Safe(s)
	}
	return out
}

// screenSnapshot lowers a registry.Screen. Sizes and the cursor fit u16:
// the terminal is at most sandbox.MaxTerminalSize on a side.
func screenSnapshot(s registry.Screen) cabi.Value {
	return []cabi.Value{
		uint16(s.Rows), uint16(s.Cols), stringsValue(s.Lines),
		uint16(s.Cursor.Row), uint16(s.Cursor.Col), s.Cursor.Visible,
		s.AltScreen, utf8Safe(s.Title),
		s.Modes.AppCursor, s.Modes.AppKeypad, s.Modes.BracketedPaste,
		stringsValue(s.Scrollback),
		uint64(max(0, s.Skipped)), uint64(max(0, s.Behind)),
	}
}

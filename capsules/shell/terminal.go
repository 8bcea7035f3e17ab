package main

// The terminal tools (capsule:process@1.2.0): an interactive program on a
// pseudo-terminal that an agent drives like a person at a keyboard, and
// wait_for, which also serves the pipe processes of the other tools.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/capsule-host/capsule-host/capsules/sdk"
	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/capsules/sdk/terminal"
)

func init() {
	sdk.Register(sdk.Tool{Name: "start_terminal", Description: startTermDesc, InputSchema: startTermSchema, Handler: sdk.Handle(startTerminal)})
	sdk.Register(sdk.Tool{Name: "terminal_send_keys", Description: keysDesc, InputSchema: keysSchema, Handler: sdk.Handle(terminalSendKeys)})
	sdk.Register(sdk.Tool{Name: "terminal_type", Description: typeDesc, InputSchema: typeSchema, Handler: sdk.Handle(terminalType)})
	sdk.Register(sdk.Tool{Name: "terminal_screen", Description: screenDesc, InputSchema: screenSchema, Handler: sdk.Handle(terminalScreen)})
	sdk.Register(sdk.Tool{Name: "terminal_resize", Description: resizeDesc, InputSchema: resizeSchema, Handler: sdk.Handle(terminalResize)})
	sdk.Register(sdk.Tool{Name: "wait_for", Description: waitForDesc, InputSchema: waitForSchema, Handler: sdk.Handle(waitFor)})
}

const (
	// defaultSettleMS is how long input tools wait for the program to go
	// quiet (its reaction drawn) before they return the screen.
	defaultSettleMS = 300
	maxSettleMS     = 10_000
	// interactiveShell is what start_terminal runs without a command: bash
	// where the sandbox has it, else sh, interactive either way.
	interactiveShell = `if command -v bash >/dev/null 2>&1; then exec bash -i; else exec sh -i; fi`
)

const (
	startTermDesc   = `Starts an interactive program on a terminal (a pseudo-terminal: isatty is true, so prompts, REPLs, TUIs, installers and job control work) and returns its id and screen. Without "command" it starts an interactive shell. Drive it with terminal_type (text, submit runs it) and terminal_send_keys (Enter, C-c, Up, Tab...), read it with terminal_screen, wait with wait_for; stop it with kill_process. Raw output stays readable with read_process_logs.`
	startTermSchema = `{"type":"object","additionalProperties":false,"properties":{
"command":{"type":"string","description":"Run as /bin/sh -c COMMAND on the terminal. Default: an interactive shell."},
"rows":{"type":"integer","minimum":1,"maximum":1000,"description":"Default 24."},
"cols":{"type":"integer","minimum":1,"maximum":1000,"description":"Default 80."},
"label":{"type":"string","maxLength":128},
"cwd":{"type":"string","description":"Working directory relative to the capsule workspace."},
"timeout_ms":{"type":"integer","minimum":1,"description":"Kill it after this long. Default: the host's ceiling."},
"settle_ms":{"type":"integer","minimum":0,"maximum":10000,"description":"Wait until the output has been quiet this long (at most 5x as long in all) before returning the screen. Default 300."}}}`

	keysDesc   = `Presses keys in a terminal, in order, then returns the screen once the program has reacted. Each item is {"key": NAME} or {"text": "literal text"}. Names (tmux's): Enter, Tab, BTab, BSpace, Escape, Space, Up, Down, Left, Right, Home, End, PageUp, PageDown, IC, DC, F1..F12, KP0..KP9, and any single character; prefixes C- (control: C-c interrupts, C-d is end-of-file), M- (meta/alt), S- (shift), e.g. "C-c", "M-x", "S-Up". An unknown name is refused and nothing is sent.`
	keysSchema = `{"type":"object","additionalProperties":false,"required":["id","keys"],"properties":{
"id":{"type":"string"},
"keys":{"type":"array","minItems":1,"items":{"type":"object","additionalProperties":false,"properties":{"key":{"type":"string"},"text":{"type":"string"}}}},
"settle_ms":{"type":"integer","minimum":0,"maximum":10000,"description":"Default 300."}}}`

	typeDesc   = `Types text into a terminal as a paste (line feeds become Enter; bracketed when the program asked for it, so a multi-line script pasted into bash runs once as a unit). With "submit": true, presses Enter after it: that is how to run a command or answer a prompt. Returns the screen once the program has reacted.`
	typeSchema = `{"type":"object","additionalProperties":false,"required":["id","text"],"properties":{
"id":{"type":"string"},"text":{"type":"string","maxLength":1048576},"submit":{"type":"boolean"},
"settle_ms":{"type":"integer","minimum":0,"maximum":10000,"description":"Default 300."}}}`

	screenDesc   = `Returns a terminal's screen as text rows (what a person would see), with the cursor position, whether a full-screen program is on the alternate screen, the title, and optionally lines that scrolled off the top.`
	screenSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{
"id":{"type":"string"},"scrollback":{"type":"integer","minimum":0,"maximum":1000,"description":"Scrolled-off lines to include. Default 0."}}}`

	resizeDesc   = `Resizes a terminal's window; the program is told (SIGWINCH) and redraws.`
	resizeSchema = `{"type":"object","additionalProperties":false,"required":["id","rows","cols"],"properties":{
"id":{"type":"string"},"rows":{"type":"integer","minimum":1,"maximum":1000},"cols":{"type":"integer","minimum":1,"maximum":1000}}}`

	waitForDesc   = `Waits until something happens to a process (terminal or not), at most timeout_ms: "regex" (RE2) matches its output after "cursor" (the cursor of a terminal tool, read_process_logs or an earlier wait_for; omitted, or a stream that cursor has not read: from the start of the output the process still has, like read_process_logs, so output printed before this call counts; pass back the cursor it returns to wait for the next occurrence), "quiet_ms" passes with no output, "input" (it is blocked waiting for input: a prompt), or "exit". Give exactly one. Returns which fired, a cursor just after it (for read_process_logs or the next wait_for), and for a terminal its screen. A condition that can no longer happen (it exited without a match) answers at once.`
	waitForSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{
"id":{"type":"string"},
"regex":{"type":"string","maxLength":4096},"stream":{"enum":["stdout","stderr"],"description":"For regex. Default stdout (a terminal's output is all on stdout)."},
"cursor":{"type":"string"},
"quiet_ms":{"type":"integer","minimum":1},
"input":{"type":"boolean"},"exit":{"type":"boolean"},
"timeout_ms":{"type":"integer","minimum":0,"maximum":20000,"description":"Default 10000."}}}`
)

type startTermIn struct {
	Command   *string `json:"command"`
	Rows      *uint16 `json:"rows"`
	Cols      *uint16 `json:"cols"`
	Label     *string `json:"label"`
	Cwd       *string `json:"cwd"`
	TimeoutMS *uint64 `json:"timeout_ms"`
	SettleMS  *uint64 `json:"settle_ms"`
}

func (in startTermIn) Validate() error {
	if in.Command != nil && strings.TrimSpace(*in.Command) == "" {
		return errors.New(`"command" must not be blank (omit it for an interactive shell)`)
	}
	if in.TimeoutMS != nil && *in.TimeoutMS == 0 {
		return errors.New(`"timeout_ms" must be at least 1`)
	}
	return checkSettle(in.SettleMS)
}

func checkSettle(ms *uint64) error {
	if ms != nil && *ms > maxSettleMS {
		return fmt.Errorf(`"settle_ms" is %d; at most %d`, *ms, maxSettleMS)
	}
	return nil
}

type keyIn struct {
	Key  *string `json:"key"`
	Text *string `json:"text"`
}

type keysIn struct {
	ID       string  `json:"id"`
	Keys     []keyIn `json:"keys"`
	SettleMS *uint64 `json:"settle_ms"`
}

func (in keysIn) Validate() error {
	if in.ID == "" {
		return errors.New(`"id" is required`)
	}
	if len(in.Keys) == 0 {
		return errors.New(`"keys" must list at least one {"key": NAME} or {"text": TEXT}`)
	}
	for i, k := range in.Keys {
		if (k.Key == nil) == (k.Text == nil) {
			return fmt.Errorf(`"keys"[%d] must have exactly one of "key" and "text"`, i)
		}
	}
	return checkSettle(in.SettleMS)
}

type typeIn struct {
	ID       string  `json:"id"`
	Text     string  `json:"text"`
	Submit   bool    `json:"submit"`
	SettleMS *uint64 `json:"settle_ms"`
}

func (in typeIn) Validate() error {
	if in.ID == "" {
		return errors.New(`"id" is required`)
	}
	return checkSettle(in.SettleMS)
}

type screenIn struct {
	ID         string `json:"id"`
	Scrollback uint32 `json:"scrollback"`
}

func (in screenIn) Validate() error {
	if in.ID == "" {
		return errors.New(`"id" is required`)
	}
	return nil
}

type resizeIn struct {
	ID   string `json:"id"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

func (in resizeIn) Validate() error {
	if in.ID == "" {
		return errors.New(`"id" is required`)
	}
	return nil
}

// screenOut is a terminal's screen for the agent.
type screenOut struct {
	ID         string   `json:"id"`
	Running    bool     `json:"running"`
	Exit       *exitOut `json:"exit,omitempty"`
	Screen     string   `json:"screen"`
	Rows       uint16   `json:"rows"`
	Cols       uint16   `json:"cols"`
	CursorRow  uint16   `json:"cursor_row"`
	CursorCol  uint16   `json:"cursor_col"`
	AltScreen  bool     `json:"alt_screen,omitempty"`
	Title      string   `json:"title,omitempty"`
	Scrollback []string `json:"scrollback,omitempty"`
	// WaitingForInput: the program is blocked reading the keyboard.
	WaitingForInput *bool `json:"waiting_for_input,omitempty"`
	// Cursor is just after the output the screen shows, for wait_for and
	// read_process_logs (empty when the output did not go quiet).
	Cursor string `json:"cursor,omitempty"`
	Note   string `json:"note,omitempty"`
}

// screenText is the visible rows, trailing blank rows dropped.
func screenText(lines []string) string {
	n := len(lines)
	for n > 0 && lines[n-1] == "" {
		n--
	}
	return strings.Join(lines[:n], "\n")
}

// screen reads id's screen and state.
func screen(id string, scrollback uint32) (screenOut, error) {
	s, err := terminal.Screen(id, scrollback)
	if err != nil {
		return screenOut{}, err
	}
	out := screenOut{ID: id, Screen: screenText(s.Lines), Rows: s.Rows, Cols: s.Cols, CursorRow: s.CursorRow,
		CursorCol: s.CursorCol, AltScreen: s.AltScreen, Title: s.Title, Scrollback: s.Scrollback}
	if s.BehindBytes > 0 || s.SkippedBytes > 0 {
		out.Note = fmt.Sprintf("the screen may be incomplete: %d bytes not yet rendered, %d lost before rendering (read_process_logs has the raw output)", s.BehindBytes, s.SkippedBytes)
	}
	if st, err := terminal.Status(id); err == nil {
		out.Running = st.Phase != process.PhaseExited
		out.Exit = exitOf(st.Exit, st.ExitReason)
		out.WaitingForInput = st.WaitingForInput
	}
	return out, nil
}

// settle waits until id's output has been quiet for ms (bounded by 5×ms:
// a program that never stops printing still gets its screen read), then
// reads the screen.
func settle(id string, ms *uint64) (screenOut, error) {
	quiet := uint64(defaultSettleMS)
	if ms != nil {
		quiet = *ms
	}
	var at string
	if quiet > 0 {
		r, err := terminal.WaitFor(id, terminal.QuietFor(quiet), 5*quiet)
		if err != nil && !errors.Is(err, process.ErrWaitTimeout) && !errors.Is(err, process.ErrClosed) {
			return screenOut{}, err
		}
		at = r.Cursor
	}
	out, err := screen(id, 0)
	if at != "" {
		out.Cursor = cursor{Out: at}.String(true, false) // a terminal writes stdout only
	}
	return out, err
}

func startTerminal(in startTermIn) (any, error) {
	const tool = "start_terminal"
	command := interactiveShell
	label := "terminal: shell"
	if in.Command != nil {
		command, label = *in.Command, labelFor("terminal: "+*in.Command)
	}
	if in.Label != nil {
		label = *in.Label
	}
	spec := terminal.Spec{Rows: 24, Cols: 80}
	if in.Rows != nil {
		spec.Rows = *in.Rows
	}
	if in.Cols != nil {
		spec.Cols = *in.Cols
	}
	id, err := terminal.Spawn(shellRequest(command, in.Cwd), process.PersistOptions{Label: &label, MaxLifetimeMS: in.TimeoutMS}, spec)
	if err != nil {
		return nil, fail(tool, err)
	}
	out, err := settle(id, in.SettleMS)
	if err != nil {
		return nil, fail(tool, err)
	}
	return out, nil
}

func terminalSendKeys(in keysIn) (any, error) {
	const tool = "terminal_send_keys"
	keys := make([]terminal.Key, len(in.Keys))
	for i, k := range in.Keys {
		if k.Key != nil {
			keys[i] = terminal.Named(*k.Key)
		} else {
			keys[i] = terminal.Text(*k.Text)
		}
	}
	if _, err := terminal.SendKeys(in.ID, keys); err != nil {
		return nil, fail(tool, err)
	}
	out, err := settle(in.ID, in.SettleMS)
	if err != nil {
		return nil, fail(tool, err)
	}
	return out, nil
}

func terminalType(in typeIn) (any, error) {
	const tool = "terminal_type"
	send := terminal.Paste
	if in.Submit {
		send = terminal.Submit
	}
	if _, err := send(in.ID, in.Text); err != nil {
		return nil, fail(tool, err)
	}
	out, err := settle(in.ID, in.SettleMS)
	if err != nil {
		return nil, fail(tool, err)
	}
	return out, nil
}

func terminalScreen(in screenIn) (any, error) {
	out, err := screen(in.ID, in.Scrollback)
	if err != nil {
		return nil, fail("terminal_screen", err)
	}
	return out, nil
}

func terminalResize(in resizeIn) (any, error) {
	const tool = "terminal_resize"
	if err := terminal.Resize(in.ID, in.Rows, in.Cols); err != nil {
		return nil, fail(tool, err)
	}
	out, err := settle(in.ID, nil)
	if err != nil {
		return nil, fail(tool, err)
	}
	return out, nil
}

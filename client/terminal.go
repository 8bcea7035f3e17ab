package client

import (
	"context"
	"net/url"
	"strconv"
)

// The operator's terminal and process-control endpoints (issue 15):
//
//	POST   /v1/processes/{id}/input     InputRequest → InputResponse
//	GET    /v1/processes/{id}/screen    Screen (?scrollback=N)
//	POST   /v1/processes/{id}/resize    ResizeRequest
//	POST   /v1/processes/{id}/wait-for  WaitForRequest → WaitForResponse
//	POST   /v1/processes/{id}/signal    SignalRequest
//	DELETE /v1/processes/{id}           release (forget an exited process)
//
// {id} is the process ID or, in this operator view, a unique prefix of
// at least 8 characters of it.

// Key is one key of an InputRequest: a tmux key name ("Enter", "C-c",
// "Up") or literal text, exactly one of the two.
type Key struct {
	Name string `json:"name,omitempty"`
	Text string `json:"text,omitempty"`
}

// InputRequest types into a process: exactly one of Keys (a terminal's
// named keys and text, encoded for its modes), Paste (a terminal paste;
// Submit adds Enter) and Data (raw bytes to stdin, as a terminal sends
// keystrokes: what attach forwards).
//
// Screen (a terminal only) answers with the screen once the program
// reacted, in the same response (capsule-host send --screen): reacted is
// output logged after the input was written, rendered by the screen
// (Reaction "output": the first output, not the whole redraw); no output
// within SettleMS of the write (default 20) is Reaction "quiet", and
// TimeoutMS (default 2000, capped like wait-for) passing first is
// "timeout". Both answer the screen as it is, never an error.
type InputRequest struct {
	Keys      []Key   `json:"keys,omitempty"`
	Paste     *string `json:"paste,omitempty"`
	Submit    bool    `json:"submit,omitempty"`
	Data      []byte  `json:"data,omitempty"`
	Screen    bool    `json:"screen,omitempty"`
	SettleMS  *int64  `json:"settle_ms,omitempty"`
	TimeoutMS *int64  `json:"timeout_ms,omitempty"`
}

// InputResponse is how many bytes reached the process and, for a
// request with Screen, how the wait ended (output, quiet, timeout) and
// the screen then.
type InputResponse struct {
	Written  int     `json:"written"`
	Reaction string  `json:"reaction,omitempty"`
	Screen   *Screen `json:"screen,omitempty"`
}

// Screen is a terminal's rendered screen.
type Screen struct {
	Rows           int      `json:"rows"`
	Cols           int      `json:"cols"`
	Lines          []string `json:"lines"`
	CursorRow      int      `json:"cursor_row"`
	CursorCol      int      `json:"cursor_col"`
	CursorVisible  bool     `json:"cursor_visible"`
	AltScreen      bool     `json:"alt_screen"`
	Title          string   `json:"title"`
	AppCursorKeys  bool     `json:"app_cursor_keys"`
	AppKeypad      bool     `json:"app_keypad"`
	BracketedPaste bool     `json:"bracketed_paste"`
	Scrollback     []string `json:"scrollback,omitempty"`
	SkippedBytes   int64    `json:"skipped_bytes"`
	BehindBytes    int64    `json:"behind_bytes"`
	// Cursor is the stdout logs cursor just after the output this screen
	// shows: following the logs from it continues the screen exactly.
	Cursor string `json:"cursor"`
}

// ResizeRequest sets a terminal's window size (1 to 1000 each).
type ResizeRequest struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// WaitForRequest waits for exactly one of: Regex (RE2) matching the
// Stream's output after Cursor ("" : from now), QuietMS without output,
// Input (the process blocks reading its input), Exit. TimeoutMS is
// capped by the host (60 s by default).
type WaitForRequest struct {
	Regex     *string `json:"regex,omitempty"`
	Stream    string  `json:"stream,omitempty"`
	Cursor    string  `json:"cursor,omitempty"`
	QuietMS   *int64  `json:"quiet_ms,omitempty"`
	Input     bool    `json:"input,omitempty"`
	Exit      bool    `json:"exit,omitempty"`
	TimeoutMS int64   `json:"timeout_ms"`
}

// WaitForResponse says which condition fired (output-matched, quiet,
// input-wait, exited) and the cursor after it.
type WaitForResponse struct {
	Fired  string `json:"fired"`
	Cursor string `json:"cursor"`
}

// SignalRequest names a signal: term, hup, int, usr1, usr2, stop, cont,
// kill.
type SignalRequest struct {
	Signal string `json:"signal"`
}

func procPath(id, tail string) string { return "/v1/processes/" + url.PathEscape(id) + tail }

// Input types into a process.
func (c *Client) Input(ctx context.Context, id string, req InputRequest) (int, error) {
	r, err := c.InputScreen(ctx, id, req)
	return r.Written, err
}

// InputScreen types into a process and returns the whole response: with
// req.Screen, the screen after the program reacted.
func (c *Client) InputScreen(ctx context.Context, id string, req InputRequest) (InputResponse, error) {
	var r InputResponse
	err := c.do(ctx, "POST", procPath(id, "/input"), req, &r)
	return r, err
}

// Reactions of an InputResponse with a screen.
const (
	ReactionOutput  = "output"
	ReactionQuiet   = "quiet"
	ReactionTimeout = "timeout"
)

// Screen returns a terminal's screen with at most scrollback lines above.
func (c *Client) Screen(ctx context.Context, id string, scrollback int) (Screen, error) {
	var s Screen
	p := procPath(id, "/screen")
	if scrollback > 0 {
		p += "?scrollback=" + strconv.Itoa(scrollback)
	}
	err := c.do(ctx, "GET", p, nil, &s)
	return s, err
}

// Resize sets a terminal's window size.
func (c *Client) Resize(ctx context.Context, id string, rows, cols uint16) error {
	return c.do(ctx, "POST", procPath(id, "/resize"), ResizeRequest{Rows: rows, Cols: cols}, nil)
}

// WaitFor blocks until the condition fires or the timeout passes (an
// *Error with code wait-timeout).
func (c *Client) WaitFor(ctx context.Context, id string, req WaitForRequest) (WaitForResponse, error) {
	var r WaitForResponse
	err := c.do(ctx, "POST", procPath(id, "/wait-for"), req, &r)
	return r, err
}

// Signal sends a signal to a process's tree.
func (c *Client) Signal(ctx context.Context, id, sig string) error {
	return c.do(ctx, "POST", procPath(id, "/signal"), SignalRequest{Signal: sig}, nil)
}

// Release forgets an exited process.
func (c *Client) Release(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", procPath(id, ""), nil, nil)
}

// Error codes the terminal endpoints add.
const (
	CodeWaitTimeout = "wait-timeout" // the wait's bound passed (408)
	CodeClosed      = "closed"       // the process's input or terminal is gone (409)
	CodeTooLarge    = "too-large"    // the input is over the host's bound (413)
)

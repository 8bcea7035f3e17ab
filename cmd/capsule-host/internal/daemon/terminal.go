package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox/terminal"
)

// The operator's terminal and process-control endpoints (issue 15): what
// capsule-host attach, send, screen, wait, signal and rm use. Like the
// other process endpoints they act on any principal's process over the
// socket, and only on the token's principal's over TCP.

// minIDPrefix is the shortest ID prefix the operator view accepts: 8
// base32 characters are 40 bits, so a collision among a host's
// processes is a real ambiguity to report, not a guess.
const minIDPrefix = 8

// terminalRoutes are the routes of this file (routes() adds them).
func (s *Server) terminalRoutes() []route {
	return []route{
		{pattern: "POST /v1/processes/{id}/input", handler: s.input, summary: "Type into a process: named keys, a paste, or raw bytes (attach); with screen, answer the screen once the program reacted (its first output after the input, rendered; quiet after settle_ms; timeout_ms bounds the wait)", req: api.InputRequest{}, resp: api.InputResponse{}},
		{pattern: "GET /v1/processes/{id}/screen", handler: s.screen, summary: "A terminal's rendered screen", query: []string{"scrollback"}, resp: api.Screen{}},
		{pattern: "POST /v1/processes/{id}/resize", handler: s.resize, summary: "Resize a terminal (the program gets SIGWINCH)", req: api.ResizeRequest{}},
		{pattern: "POST /v1/processes/{id}/wait-for", handler: s.waitFor, summary: "Wait for output matching a regex, quiet, input-wait or exit (bounded)", req: api.WaitForRequest{}, resp: api.WaitForResponse{}},
		{pattern: "POST /v1/processes/{id}/signal", handler: s.signal, summary: "Send a signal to a process's tree", req: api.SignalRequest{}},
		{pattern: "DELETE /v1/processes/{id}", handler: s.release, summary: "Release (forget) an exited process"},
	}
}

// fullID resolves an ID prefix of at least minIDPrefix characters to the
// one visible process it starts; a full-length ID is taken as is.
func (s *Server) fullID(r *http.Request, id string) (string, error) {
	const idLen = 52
	if len(id) >= idLen {
		return id, nil
	}
	if len(id) < minIDPrefix {
		return "", fmt.Errorf("%w: process ID %q: give the full ID or a prefix of at least %d characters", registry.ErrInvalidInput, id, minIDPrefix)
	}
	f := registry.OperatorFilter{}
	if wh := whoFrom(r); wh.tcp {
		f.Principal = wh.principal
	}
	ls := s.rt.Registry.OperatorList(f)
	ids := make([]string, len(ls))
	for i, in := range ls {
		ids[i] = in.ID
	}
	return matchPrefix(ids, id)
}

// matchPrefix is the one ID of ids that starts with prefix: none is
// no-such-process; several is invalid input saying it is ambiguous, with
// how many and, for the first three, the shortest prefix that names each
// alone (the operator sees the IDs in ps anyway).
func matchPrefix(ids []string, prefix string) (string, error) {
	var match []string
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 0:
		return "", registry.ErrNoSuchProcess
	case 1:
		return match[0], nil
	}
	slices.Sort(match)
	common := func(a, b string) int {
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		return n
	}
	shown := make([]string, 0, 3)
	for i, m := range match[:min(3, len(match))] {
		n := 0
		if i > 0 {
			n = common(m, match[i-1])
		}
		if i+1 < len(match) {
			n = max(n, common(m, match[i+1]))
		}
		shown = append(shown, m[:min(len(m), n+1)])
	}
	more := ""
	if len(match) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(match)-len(shown))
	}
	return "", fmt.Errorf("%w: process ID prefix %q is ambiguous: it matches %d processes (%s%s); give more characters",
		registry.ErrInvalidInput, prefix, len(match), strings.Join(shown, ", "), more)
}

// regCodeTerminal maps the registry classes the terminal endpoints add.
func regCodeTerminal(err error) (string, int) {
	switch {
	case errors.Is(err, registry.ErrWaitTimeout):
		return api.CodeWaitTimeout, http.StatusRequestTimeout
	case errors.Is(err, registry.ErrClosed):
		return api.CodeClosed, http.StatusConflict
	case errors.Is(err, registry.ErrTooLarge):
		return api.CodeTooLarge, http.StatusRequestEntityTooLarge
	}
	return api.CodeInternal, http.StatusInternalServerError
}

// target resolves the request's {id} to a visible process's full ID,
// answering the error itself (ok false).
func (s *Server) target(w http.ResponseWriter, r *http.Request) (string, bool) {
	info, err := s.visible(r, r.PathValue("id"))
	if err != nil {
		writeRegErr(w, err)
		return "", false
	}
	return info.ID, true
}

// Send-and-screen defaults (InputRequest.Screen): settle is how long
// after the write no output means the program echoes nothing; the bound
// is how long the whole wait may take.
const (
	defaultSettle      = 20 * time.Millisecond
	defaultReactBound  = 2 * time.Second
	maxInputScreenWait = time.Minute
)

var reactionNames = map[registry.Reaction]string{
	registry.ReactedOutput: api.ReactionOutput, registry.ReactedQuiet: api.ReactionQuiet, registry.ReactedTimeout: api.ReactionTimeout,
}

// checkInput says what is wrong with an input body, "" for nothing.
func checkInput(req api.InputRequest) string {
	n := 0
	for _, set := range []bool{len(req.Keys) > 0, req.Paste != nil, len(req.Data) > 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return "input body: give exactly one of keys, paste and data"
	}
	if !req.Screen && (req.SettleMS != nil || req.TimeoutMS != nil) {
		return "input body: settle_ms and timeout_ms go with screen"
	}
	for name, v := range map[string]*int64{"settle_ms": req.SettleMS, "timeout_ms": req.TimeoutMS} {
		if v != nil && (*v < 0 || time.Duration(*v)*time.Millisecond > maxInputScreenWait) {
			return fmt.Sprintf("input body: %s %d: want 0 to %d", name, *v, maxInputScreenWait.Milliseconds())
		}
	}
	return ""
}

// msOr is a request's milliseconds, or def when it gave none.
func msOr(v *int64, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	return time.Duration(*v) * time.Millisecond
}

func (s *Server) input(w http.ResponseWriter, r *http.Request) {
	var req api.InputRequest
	if !decodeBody(w, r, maxBody, "input body", &req) {
		return
	}
	if bad := checkInput(req); bad != "" {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, bad)
		return
	}
	id, ok := s.target(w, r)
	if !ok {
		return
	}
	reg, ctx := s.rt.Registry, r.Context()
	var mark registry.InputMark
	var err error
	if req.Screen { // before the write: its output is the reaction
		if mark, err = reg.OperatorMarkInput(id); err != nil {
			writeRegErr(w, err)
			return
		}
	}
	written, err := s.writeInput(ctx, id, req)
	if err != nil {
		writeRegErr(w, err)
		return
	}
	resp := api.InputResponse{Written: written}
	if req.Screen {
		sc, how, err := reg.OperatorAwaitReaction(ctx, id, mark, msOr(req.SettleMS, defaultSettle), msOr(req.TimeoutMS, defaultReactBound))
		if err != nil {
			writeRegErr(w, err)
			return
		}
		scr := apiScreen(sc)
		resp.Reaction, resp.Screen = reactionNames[how], &scr
	}
	writeJSON(w, http.StatusOK, resp)
}

// writeInput writes the request's keys, paste or data.
func (s *Server) writeInput(ctx context.Context, id string, req api.InputRequest) (int, error) {
	reg := s.rt.Registry
	switch {
	case len(req.Keys) > 0:
		keys := make([]terminal.Key, len(req.Keys))
		for i, k := range req.Keys {
			keys[i] = terminal.Key{Name: k.Name, Text: k.Text}
		}
		return reg.OperatorSendKeys(ctx, id, keys)
	case req.Paste != nil:
		return reg.OperatorPaste(ctx, id, []byte(*req.Paste), req.Submit)
	}
	return reg.OperatorWriteStdin(ctx, id, req.Data)
}

func (s *Server) screen(w http.ResponseWriter, r *http.Request) {
	sb := 0
	if v := r.URL.Query().Get("scrollback"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, fmt.Sprintf("scrollback %q: want a line count >= 0", v))
			return
		}
		sb = min(n, 1000)
	}
	id, ok := s.target(w, r)
	if !ok {
		return
	}
	sc, err := s.rt.Registry.OperatorSnapshot(r.Context(), id, uint32(sb))
	if err != nil {
		writeRegErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiScreen(sc))
}

// apiScreen is the API's form of a registry screen.
func apiScreen(sc registry.Screen) api.Screen {
	return api.Screen{
		Rows: sc.Rows, Cols: sc.Cols, Lines: sc.Lines, CursorRow: sc.Cursor.Row, CursorCol: sc.Cursor.Col,
		CursorVisible: sc.Cursor.Visible, AltScreen: sc.AltScreen, Title: sc.Title,
		AppCursorKeys: sc.Modes.AppCursor, AppKeypad: sc.Modes.AppKeypad, BracketedPaste: sc.Modes.BracketedPaste,
		Scrollback: sc.Scrollback, SkippedBytes: sc.Skipped, BehindBytes: sc.Behind, Cursor: sc.LogCursor,
	}
}

func (s *Server) resize(w http.ResponseWriter, r *http.Request) {
	var req api.ResizeRequest
	if !decodeBody(w, r, 4096, "resize body", &req) {
		return
	}
	id, ok := s.target(w, r)
	if !ok {
		return
	}
	if err := s.rt.Registry.OperatorResize(id, req.Rows, req.Cols); err != nil {
		writeRegErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// waitCondition is the registry condition of a request, or a message
// naming what is wrong with it.
func waitCondition(req api.WaitForRequest) (registry.WaitCondition, string) {
	n := 0
	for _, set := range []bool{req.Regex != nil, req.QuietMS != nil, req.Input, req.Exit} {
		if set {
			n++
		}
	}
	if n != 1 {
		return registry.WaitCondition{}, "wait-for body: give exactly one of regex, quiet_ms, input and exit"
	}
	switch {
	case req.Regex != nil:
		c := registry.WaitCondition{Kind: registry.WaitOutput, Regex: *req.Regex}
		switch req.Stream {
		case "", "stdout":
		case "stderr":
			c.Stream = registry.Stderr
		default:
			return c, fmt.Sprintf("wait-for body: stream %q: want stdout or stderr", req.Stream)
		}
		if req.Cursor != "" {
			c.Cursor = &req.Cursor
		}
		return c, ""
	case req.QuietMS != nil:
		if *req.QuietMS <= 0 {
			return registry.WaitCondition{}, "wait-for body: quiet_ms must be at least 1"
		}
		return registry.WaitCondition{Kind: registry.WaitQuiet, Quiet: time.Duration(*req.QuietMS) * time.Millisecond}, ""
	case req.Input:
		return registry.WaitCondition{Kind: registry.WaitInput}, ""
	}
	return registry.WaitCondition{Kind: registry.WaitExit}, ""
}

var firedNames = map[registry.WaitKind]string{
	registry.WaitOutput: "output-matched", registry.WaitQuiet: "quiet", registry.WaitInput: "input-wait", registry.WaitExit: "exited",
}

func (s *Server) waitFor(w http.ResponseWriter, r *http.Request) {
	var req api.WaitForRequest
	if !decodeBody(w, r, 16<<10, "wait-for body", &req) {
		return
	}
	cond, bad := waitCondition(req)
	if bad == "" && req.TimeoutMS < 0 {
		bad = "wait-for body: timeout_ms must be >= 0"
	}
	if bad != "" {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, bad)
		return
	}
	id, ok := s.target(w, r)
	if !ok {
		return
	}
	res, err := s.rt.Registry.OperatorWaitFor(r.Context(), id, cond, time.Duration(req.TimeoutMS)*time.Millisecond)
	if err != nil {
		writeRegErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.WaitForResponse{Fired: firedNames[res.Fired], Cursor: res.Cursor})
}

var signalNames = map[string]registry.Signal{
	"term": registry.SigTerm, "hup": registry.SigHup, "int": registry.SigInt, "usr1": registry.SigUsr1,
	"usr2": registry.SigUsr2, "stop": registry.SigStop, "cont": registry.SigCont, "kill": registry.SigKill,
}

// parseSignal accepts term, TERM, SIGTERM and sigterm alike.
func parseSignal(name string) (registry.Signal, bool) {
	sig, ok := signalNames[strings.TrimPrefix(strings.ToLower(name), "sig")]
	return sig, ok
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request) {
	var req api.SignalRequest
	if !decodeBody(w, r, 4096, "signal body", &req) {
		return
	}
	sig, ok := parseSignal(req.Signal)
	if !ok {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, fmt.Sprintf("signal %q: want one of term, hup, int, usr1, usr2, stop, cont, kill", req.Signal))
		return
	}
	id, ok := s.target(w, r)
	if !ok {
		return
	}
	if err := s.rt.Registry.OperatorSignal(context.WithoutCancel(r.Context()), id, sig); err != nil {
		writeRegErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	id, ok := s.target(w, r)
	if !ok {
		return
	}
	if err := s.rt.Registry.OperatorRelease(id); err != nil {
		writeRegErr(w, err)
		return
	}
	s.log.Info("process released", "by", s.by(r), "proc", s.rt.Registry.LogID(id))
	writeJSON(w, http.StatusOK, struct{}{})
}

// terminalView fills the operator view's fields of issue 15: the argv,
// the terminal, waiting-for-input and the reap deadline.
func terminalView(in registry.Info, p *api.Process) {
	p.Args = in.Args
	if t := in.Terminal; t != nil {
		p.Terminal = &api.TerminalSize{Rows: t.Rows, Cols: t.Cols, Term: t.Term}
	}
	p.WaitingForInput = in.WaitingForInput
	if in.ReapIn != nil {
		ms := in.ReapIn.Milliseconds()
		p.ReapInMS = &ms
	}
	if in.ReapRule != nil {
		p.ReapRule = in.ReapRule.String()
	}
}

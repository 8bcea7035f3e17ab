package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/terminal"
)

// Terminal processes: a persistent spawn with PersistOptions.Terminal
// runs on a PTY (the backend's), and the registry keeps a screen model
// (sandbox/terminal, a VT emulator) fed from the process's output log on
// its own goroutine: the pump writes the raw bytes at full speed and the
// emulator (much slower: see notes) never sits on its path; read-since
// still returns the raw bytes. Keys and pastes are encoded for the modes
// the screen saw and written like write-stdin (same cap, same bound).

// TerminalOptions ask a persistent spawn for a terminal.
type TerminalOptions struct {
	Rows, Cols uint16
	// Term is the TERM the process gets; "" is DefaultTerm.
	Term string
}

// DefaultTerm is the TERM of a terminal whose spawn names none: what the
// screen model emulates.
const DefaultTerm = "xterm-256color"

const (
	// termScrollback is how many scrolled-off lines the screen keeps.
	termScrollback = 1000
	// feedBatch bounds one emulator write, so a snapshot waits for at
	// most one batch behind the lock.
	feedBatch = 64 << 10
	// catchUpBound is how long a terminal call waits for the screen to
	// render the output logged before the call.
	catchUpBound = 2 * time.Second
	// replyBound bounds writing the emulator's answer to a query.
	replyBound = time.Second
)

// Screen is a terminal's snapshot: the rendered screen, and how much of
// the output it does not reflect.
type Screen struct {
	terminal.Snapshot
	// Skipped counts output bytes never rendered: they left the log
	// (ring and spill) before the emulator read them.
	Skipped int64
	// Behind counts output bytes logged before the call that the
	// emulator had not rendered when the catch-up bound passed.
	Behind int64
	// Rendered is the stdout offset the screen shows output up to, and
	// LogCursor the read-since cursor there (not part of the WIT record).
	Rendered  int64
	LogCursor string
}

// termState is the registry's side of one terminal.
type termState struct {
	screen *terminal.Screen
	log    sandbox.Log
	// feedMu is held by the feeder around one batch (write, then fed
	// moves) and by a resize, so a resize lands between two batches at a
	// known offset, where a replay applies it again (replay).
	feedMu sync.Mutex
	replay []journal.Resize // adopted: resizes still to apply, by offset; feeder only
	mu     sync.Mutex
	fed    int64         // output offset rendered so far
	moved  chan struct{} // closed (and replaced) whenever fed moves
	done   chan struct{} // closed when the feeder ended
	// skipped: see Screen.Skipped.
	skipped int64
	size    TerminalInfo // the PTY's size now (process-info)
}

// applyTerminal turns the persist options' terminal into the spec's:
// stdin open (the PTY's input), the size checked.
func applyTerminal(pr *prepared, req SpawnRequest) error {
	t := pr.persist.Terminal
	if t == nil {
		return nil
	}
	if err := sandbox.CheckTerminalSize(t.Rows, t.Cols); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	term := t.Term
	if term == "" {
		term = DefaultTerm
	}
	if !validTerm(term) {
		return fmt.Errorf("%w: terminal term %q: at most 64 bytes of A-Z a-z 0-9 . _ + -", ErrInvalidInput, term)
	}
	pr.spec.Terminal = &sandbox.TerminalSpec{Rows: t.Rows, Cols: t.Cols, Term: term}
	pr.spec.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen, Data: req.Stdin}
	return nil
}

// validTerm: TERM names a terminfo entry, a file name; nothing else
// belongs in it.
func validTerm(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '+' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// startTerminal makes the screen of p (started as h) and starts its
// feeder; nil for a process without a terminal. An adopted terminal
// (adopted) answers no query in the output it replays: those were
// answered, or not, before the restart. A new one answers from the first
// byte: a program may query the terminal before the screen exists.
func (r *Registry) startTerminal(p *proc, h sandbox.Handle, t *sandbox.TerminalSpec, replay []journal.Resize, adopted bool) *termState {
	if t == nil {
		return nil
	}
	ts := &termState{log: h.Stdout(), moved: make(chan struct{}), done: make(chan struct{}), replay: replay,
		size: TerminalInfo{Rows: t.Rows, Cols: t.Cols, Term: t.Term}}
	if n := len(replay); n > 0 {
		ts.size.Rows, ts.size.Cols = replay[n-1].Rows, replay[n-1].Cols
	}
	live := int64(0)
	if adopted {
		live = ts.log.End()
	}
	scr, err := terminal.NewScreen(terminal.ScreenConfig{
		Rows: int(t.Rows), Cols: int(t.Cols), Scrollback: termScrollback,
		Reply: func(b []byte) {
			if ts.rendered() >= live {
				r.reply(p, h, b)
			}
		},
	})
	if err != nil { // the size was checked by applyTerminal
		r.log.Error("terminal screen", append(p.attrs(), "err", err)...)
		return nil
	}
	ts.screen = scr
	go r.feed(ts)
	return ts
}

// reply writes the emulator's answer to a query (a cursor position
// report, device attributes) to the terminal's input, as a terminal
// does, serialised with write-stdin and bounded; a reply that cannot be
// written in time is dropped (the application asked a terminal that is
// not read).
func (r *Registry) reply(p *proc, h sandbox.Handle, b []byte) {
	st := h.Stdin()
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), replyBound)
	defer cancel()
	select {
	case p.stdinSem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-p.stdinSem }()
	st.Write(ctx, b)
}

func (ts *termState) rendered() int64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.fed
}

// feed renders the output log into the screen until the log is closed
// and rendered, or the registry shuts down. The screen stays readable
// after it ends.
func (r *Registry) feed(ts *termState) {
	defer close(ts.done)
	defer ts.screen.Close()
	for {
		ch := ts.log.Changed() // arm, then read: no lost wake-up
		moved, err := ts.batch()
		if err != nil {
			return // removed by cleanup
		}
		if moved {
			continue
		}
		if ts.log.Closed() {
			return
		}
		select {
		case <-ch:
		case <-r.reaperStop:
			return
		}
	}
}

// batch renders one batch of output, first applying the replayed
// resizes it reached, and never reading past the next one.
func (ts *termState) batch() (moved bool, err error) {
	ts.feedMu.Lock()
	defer ts.feedMu.Unlock()
	off := ts.rendered()
	for len(ts.replay) > 0 && ts.replay[0].At <= off {
		ts.screen.Resize(int(ts.replay[0].Rows), int(ts.replay[0].Cols))
		ts.replay = ts.replay[1:]
	}
	limit := int64(feedBatch)
	if len(ts.replay) > 0 {
		limit = min(limit, ts.replay[0].At-off)
	}
	c, err := ts.log.ReadFrom(off, int(limit))
	if err != nil {
		return false, err
	}
	if len(c.Data) > 0 {
		ts.screen.Write(c.Data)
	}
	if c.Next == off {
		return false, nil
	}
	ts.mu.Lock()
	ts.fed, ts.skipped = c.Next, ts.skipped+c.Dropped
	close(ts.moved)
	ts.moved = make(chan struct{})
	ts.mu.Unlock()
	return true, nil
}

// resize resizes the screen between two batches and returns the output
// offset it applies from.
func (ts *termState) resize(rows, cols uint16) (int64, error) {
	ts.feedMu.Lock()
	defer ts.feedMu.Unlock()
	ts.mu.Lock()
	ts.size.Rows, ts.size.Cols = rows, cols
	ts.mu.Unlock()
	return ts.rendered(), ts.screen.Resize(int(rows), int(cols))
}

// catchUp waits, up to catchUpBound, for the screen to render what the
// log held at the call; it returns how many bytes it is still behind.
func (ts *termState) catchUp(ctx context.Context) int64 {
	target := ts.log.End()
	t := time.NewTimer(catchUpBound)
	defer t.Stop()
	for {
		ts.mu.Lock()
		fed, moved := ts.fed, ts.moved
		ts.mu.Unlock()
		if fed >= target {
			return 0
		}
		select {
		case <-moved:
		case <-ts.done:
			return max(0, target-ts.rendered())
		case <-t.C:
			return target - fed
		case <-ctx.Done():
			return target - fed
		}
	}
}

// terminalOf resolves id to a terminal process of the caller.
func (r *Registry) terminalOf(ctx context.Context, id string) (*proc, *termState, error) {
	p, _, err := r.resolve(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return hasTerminal(p)
}

func hasTerminal(p *proc) (*proc, *termState, error) {
	if p.term == nil {
		return nil, nil, fmt.Errorf("%w: the process has no terminal (spawned without one)", ErrInvalidInput)
	}
	return p, p.term, nil
}

// Snapshot renders a terminal's screen with at most scrollback lines of
// scrollback, after the screen caught up with the output so far
// (bounded: Screen.Behind says what it missed).
func (r *Registry) Snapshot(ctx context.Context, id string, scrollback uint32) (Screen, error) {
	p, ts, err := r.terminalOf(ctx, id)
	if err != nil {
		return Screen{}, err
	}
	return r.snapshot(ctx, p, ts, scrollback), nil
}

// snapshot renders under feedMu, so the screen and Cursor (the stdout
// offset it rendered up to) are one instant: output read from Cursor on
// is exactly what the screen does not show yet (attach relies on it).
func (r *Registry) snapshot(ctx context.Context, p *proc, ts *termState, scrollback uint32) Screen {
	behind := ts.catchUp(ctx)
	ts.feedMu.Lock()
	s := Screen{Snapshot: ts.screen.Snapshot(int(min(scrollback, termScrollback))), Behind: behind}
	ts.mu.Lock()
	s.Skipped, s.Rendered = ts.skipped, ts.fed
	ts.mu.Unlock()
	ts.feedMu.Unlock()
	s.LogCursor = r.encodeCursor(p.key, Stdout, s.Rendered)
	return s
}

// SendKeys types keys (tmux names, or text) into a terminal, encoded for
// the modes the application set (application cursor keys, keypad). An
// unknown name is ErrInvalidInput naming it and its index; nothing of
// the list is sent then.
func (r *Registry) SendKeys(ctx context.Context, id string, keys []terminal.Key) (int, error) {
	p, ts, err := r.terminalOf(ctx, id)
	if err != nil {
		return 0, err
	}
	return r.sendKeys(ctx, p, ts, keys)
}

func (r *Registry) sendKeys(ctx context.Context, p *proc, ts *termState, keys []terminal.Key) (int, error) {
	ts.catchUp(ctx)
	b, err := terminal.EncodeKeys(keys, ts.screen.Modes())
	if err != nil {
		var ke *terminal.KeyError
		if errors.As(err, &ke) {
			return 0, fmt.Errorf("%w: key %d %q: %s", ErrInvalidInput, ke.Index, ke.Name, ke.Reason)
		}
		return 0, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return r.writeStdin(ctx, p, b)
}

// Paste pastes text into a terminal: bracketed when the application
// enabled bracketed paste, raw otherwise; submit adds Enter after it.
// The text is capped like write-stdin.
func (r *Registry) Paste(ctx context.Context, id string, text []byte, submit bool) (int, error) {
	p, ts, err := r.terminalOf(ctx, id)
	if err != nil {
		return 0, err
	}
	return r.paste(ctx, p, ts, text, submit)
}

func (r *Registry) paste(ctx context.Context, p *proc, ts *termState, text []byte, submit bool) (int, error) {
	if len(text) > r.cfg.Defaults.StdinWriteMax {
		return 0, fmt.Errorf("%w: paste: %d bytes (max %d per call)", ErrTooLarge, len(text), r.cfg.Defaults.StdinWriteMax)
	}
	ts.catchUp(ctx)
	enc := terminal.Paste
	if submit {
		enc = terminal.Submit
	}
	b := enc(text, ts.screen.Modes())
	if len(b) > r.cfg.Defaults.StdinWriteMax {
		return 0, fmt.Errorf("%w: paste: %d bytes encoded (max %d per call)", ErrTooLarge, len(b), r.cfg.Defaults.StdinWriteMax)
	}
	return r.writeStdin(ctx, p, b)
}

// Resize sets a terminal's window size: the PTY's (the application gets
// SIGWINCH), the screen model's, and the journal's.
func (r *Registry) Resize(ctx context.Context, id string, rows, cols uint16) error {
	p, ts, err := r.terminalOf(ctx, id)
	if err != nil {
		return err
	}
	return r.resize(p, ts, rows, cols)
}

func (r *Registry) resize(p *proc, ts *termState, rows, cols uint16) error {
	if err := sandbox.CheckTerminalSize(rows, cols); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	rz, ok := p.h.(sandbox.Resizer)
	if !ok {
		return fmt.Errorf("%w: the backend cannot resize terminals", ErrUnavailable)
	}
	if err := rz.Resize(rows, cols); err != nil {
		if errors.Is(err, sandbox.ErrNoTerminal) {
			return fmt.Errorf("%w: resize: the terminal is gone (the process ended)", ErrClosed)
		}
		return mapSandboxErr("resize", err)
	}
	// As tmux: output not yet rendered, drawn before or after the
	// resize, renders at the new size; the application's redraw on
	// SIGWINCH makes it right.
	at, err := ts.resize(rows, cols)
	r.journalResize(p, journal.Resize{At: at, Rows: rows, Cols: cols})
	return err
}

// jTerminal is the journal's form of a spec's terminal.
func jTerminal(t *sandbox.TerminalSpec) *journal.Terminal {
	if t == nil {
		return nil
	}
	return &journal.Terminal{Rows: t.Rows, Cols: t.Cols, Term: t.Term}
}

// adoptTerminal rebuilds an adopted terminal's screen at its journaled
// size by replaying the output log from its oldest retained byte: the
// same bytes at the same size give the same screen (what left the log
// before is Screen.Skipped). The replay answers no query: those were
// answered, or not, before the restart.
func (r *Registry) adoptTerminal(p *proc, t *journal.Terminal) *termState {
	if t == nil {
		return nil
	}
	return r.startTerminal(p, p.h, &sandbox.TerminalSpec{Rows: t.Rows, Cols: t.Cols, Term: t.Term}, t.Resizes, true)
}

// journalResize records a resize, so a restarted daemon's replay
// resizes the screen where this one did (the last MaxResizes: older
// ones fall before any output a replay still has, in practice).
func (r *Registry) journalResize(p *proc, z journal.Resize) {
	if r.jr == nil || !p.persistent {
		return
	}
	err := r.jr.UpdateProcess(journal.Key(p.key), func(jp *journal.Process) error {
		if t := jp.Terminal; t != nil {
			t.Resizes = append(t.Resizes, z)
			t.Resizes = t.Resizes[max(0, len(t.Resizes)-journal.MaxResizes):]
		}
		return nil
	})
	if err != nil {
		r.log.Warn("journal: recording a resize failed; a restart would render at the old size", append(p.attrs(), "err", err)...)
	}
}

package terminal

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// ErrInvalidSize: a terminal size outside 1..MaxRows × 1..MaxCols.
var ErrInvalidSize = errors.New("invalid terminal size")

// The size bounds. 1000 rows is the refusal bound; columns get
// the same room. The emulator's memory is proportional to rows × cols
// (plus scrollback × cols), so the bounds are also its memory bound.
const (
	MaxRows = 1000
	MaxCols = 1000
)

// CheckSize refuses a size the emulator or a PTY should not take.
func CheckSize(rows, cols int) error {
	if rows < 1 || rows > MaxRows {
		return fmt.Errorf("rows %d: not in 1..%d: %w", rows, MaxRows, ErrInvalidSize)
	}
	if cols < 1 || cols > MaxCols {
		return fmt.Errorf("cols %d: not in 1..%d: %w", cols, MaxCols, ErrInvalidSize)
	}
	return nil
}

// ScreenConfig configures NewScreen.
type ScreenConfig struct {
	Rows, Cols int
	// Scrollback is the number of lines kept above the primary screen
	// (0: none). Each line costs up to Cols cells.
	Scrollback int
	// Reply receives the emulator's answers to the application's queries
	// (cursor position report, device attributes, mode reports), which a
	// real terminal sends back on its input; the backend writes them to
	// the PTY master. Nil discards them. It runs on the screen's own
	// goroutine and must not block for long: the emulator waits for it.
	Reply func([]byte)
}

// Screen is the rendered state of a terminal: a VT emulator
// (github.com/charmbracelet/x/vt) fed the same bytes as the output log,
// plus the state the snapshot reports and the key encoders need (modes,
// title). Safe for concurrent use.
type Screen struct {
	mu     sync.Mutex
	emu    *vt.Emulator
	modes  Modes
	title  string
	closed bool
	// scrollback is the configured scrollback, the cap of what a
	// snapshot reports.
	scrollback int
	// replies ends when the emulator is closed and its reply pipe drained.
	replies chan struct{}
	// marks caps grapheme clusters before the emulator sees them (marks.go).
	marks clusterCap
}

// NewScreen makes a screen of the given size.
func NewScreen(cfg ScreenConfig) (*Screen, error) {
	if err := CheckSize(cfg.Rows, cfg.Cols); err != nil {
		return nil, err
	}
	if cfg.Scrollback < 0 {
		return nil, fmt.Errorf("scrollback %d: must be >= 0: %w", cfg.Scrollback, ErrInvalidSize)
	}
	s := &Screen{emu: vt.NewEmulator(cfg.Cols, cfg.Rows), replies: make(chan struct{}), scrollback: cfg.Scrollback}
	// The emulator cannot turn scrollback off (SetMaxLines ignores 0):
	// keep one line and never report it.
	s.emu.SetScrollbackSize(max(1, cfg.Scrollback))
	s.emu.SetCallbacks(vt.Callbacks{
		Title:       func(t string) { s.title = t },
		EnableMode:  func(m ansi.Mode) { s.setMode(m, true) },
		DisableMode: func(m ansi.Mode) { s.setMode(m, false) },
	})
	go s.pumpReplies(cfg.Reply)
	return s, nil
}

// setMode tracks the modes of Modes; called by the emulator under mu.
func (s *Screen) setMode(m ansi.Mode, on bool) {
	switch m {
	case ansi.ModeCursorKeys:
		s.modes.AppCursor = on
	case ansi.ModeNumericKeypad:
		s.modes.AppKeypad = on
	case ansi.ModeBracketedPaste:
		s.modes.BracketedPaste = on
	}
}

// pumpReplies drains the emulator's reply pipe (an io.Pipe: unread, it
// would block the next Write that answers a query).
func (s *Screen) pumpReplies(reply func([]byte)) {
	defer close(s.replies)
	buf := make([]byte, 4096)
	for {
		n, err := s.emu.Read(buf)
		if n > 0 && reply != nil {
			reply(append([]byte(nil), buf[:n]...))
		}
		if err != nil {
			return
		}
	}
}

// Write feeds the emulator bytes the application wrote. It never fails
// on content: any byte sequence is rendered or ignored (runes past
// MaxClusterRunes in one cluster are dropped). It reports all of p
// written.
func (s *Screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, io.ErrClosedPipe
	}
	if _, err := s.emu.Write(s.marks.filter(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize changes the emulator's size (the PTY's is the backend's).
func (s *Screen) Resize(rows, cols int) error {
	if err := CheckSize(rows, cols); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emu.Resize(cols, rows)
	return nil
}

// Modes reports the modes the application set, for EncodeKeys and Paste.
func (s *Screen) Modes() Modes {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.modes
}

// Close stops the reply goroutine; later Writes fail with
// io.ErrClosedPipe. Idempotent. It closes the emulator's reply pipe
// itself rather than calling Emulator.Close, whose closed flag is read
// unlocked by Emulator.Read (a data race under -race in vt v0.1.0).
func (s *Screen) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		if pw, ok := s.emu.InputPipe().(*io.PipeWriter); ok {
			pw.CloseWithError(io.EOF)
		}
	}
	s.mu.Unlock()
	<-s.replies
	return nil
}

// Cursor is the cursor's cell, zero-based, and whether it is shown.
type Cursor struct {
	Row, Col int
	Visible  bool
}

// Snapshot is the rendered screen at one instant.
type Snapshot struct {
	Rows, Cols int
	// Lines are the visible rows as text, trailing blanks trimmed (as
	// tmux capture-pane -p prints them); a wide character appears once.
	Lines     []string
	Cursor    Cursor
	AltScreen bool
	Title     string
	Modes     Modes
	// Scrollback are the last lines scrolled off the primary screen,
	// oldest first.
	Scrollback []string
}

// Text is the visible rows joined by newlines, trailing blank rows
// dropped: the form capture-pane -p prints.
func (s Snapshot) Text() string {
	n := len(s.Lines)
	for n > 0 && s.Lines[n-1] == "" {
		n--
	}
	return strings.Join(s.Lines[:n], "\n")
}

// Snapshot renders the screen; scrollback is how many scrollback lines
// to include at most (0: none).
func (s *Screen) Snapshot(scrollback int) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.emu
	w, h := e.Width(), e.Height()
	pos := e.CursorPosition()
	snap := Snapshot{
		Rows: h, Cols: w,
		Lines:     make([]string, h),
		Cursor:    Cursor{Row: pos.Y, Col: pos.X, Visible: !e.CursorHidden()},
		AltScreen: e.IsAltScreen(),
		Title:     s.title,
		Modes:     s.modes,
	}
	for y := range h {
		snap.Lines[y] = lineText(w, func(x int) *uv.Cell { return e.CellAt(x, y) })
	}
	scrollback = min(scrollback, s.scrollback)
	if sb := e.Scrollback(); sb != nil && scrollback > 0 {
		lines := sb.Lines()
		for _, l := range lines[max(0, len(lines)-scrollback):] {
			snap.Scrollback = append(snap.Scrollback, lineText(len(l), func(x int) *uv.Cell { return &l[x] }))
		}
	}
	return snap
}

// lineText is one row's text: a zero cell (the second half of a wide
// character) adds nothing, an empty one a space; trailing spaces go.
func lineText(w int, cell func(x int) *uv.Cell) string {
	var b strings.Builder
	b.Grow(w) // one allocation for an ASCII row (growing was a third of a snapshot's CPU)
	for x := range w {
		c := cell(x)
		switch {
		case c == nil || c.Content == "" && c.Width > 0:
			b.WriteByte(' ')
		case c.IsZero():
		case c.Content == "":
			b.WriteByte(' ')
		default:
			b.WriteString(c.Content)
		}
	}
	return strings.TrimRight(b.String(), " ")
}

var _ io.Writer = (*Screen)(nil)

package terminal

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

func newScreen(t testing.TB, rows, cols, sb int, reply func([]byte)) *Screen {
	t.Helper()
	s, err := NewScreen(ScreenConfig{Rows: rows, Cols: cols, Scrollback: sb, Reply: reply})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func feed(t testing.TB, s *Screen, text string) {
	t.Helper()
	if _, err := s.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
}

func TestScreenModes(t *testing.T) {
	s := newScreen(t, 24, 80, 0, nil)
	steps := []struct {
		in   string
		want Modes
	}{
		{"", Modes{}},
		{"\x1b[?1h", Modes{AppCursor: true}},
		{"\x1b=", Modes{AppCursor: true, AppKeypad: true}},
		{"\x1b[?2004h", Modes{AppCursor: true, AppKeypad: true, BracketedPaste: true}},
		{"\x1b[?1l\x1b>", Modes{BracketedPaste: true}},
		{"\x1b[?2004l", Modes{}},
		{"\x1b[?1;2004h", Modes{AppCursor: true, BracketedPaste: true}},
		{"\x1bc", Modes{}}, // RIS resets every mode
	}
	for _, st := range steps {
		feed(t, s, st.in)
		if got := s.Modes(); got != st.want {
			t.Fatalf("after %q: modes %+v, want %+v", st.in, got, st.want)
		}
		if got := s.Snapshot(0).Modes; got != st.want {
			t.Fatalf("after %q: snapshot modes %+v, want %+v", st.in, got, st.want)
		}
	}
}

func TestScreenSnapshot(t *testing.T) {
	s := newScreen(t, 5, 20, 0, nil)
	feed(t, s, "hello\r\n\tx\r\nwide: 日本\r\n\x1b]2;my title\x07")
	snap := s.Snapshot(0)
	want := []string{"hello", "        x", "wide: 日本", "", ""}
	if strings.Join(snap.Lines, "|") != strings.Join(want, "|") {
		t.Fatalf("lines %q, want %q", snap.Lines, want)
	}
	if snap.Rows != 5 || snap.Cols != 20 || snap.Title != "my title" || snap.AltScreen {
		t.Fatalf("snapshot %+v", snap)
	}
	if snap.Cursor != (Cursor{Row: 3, Col: 0, Visible: true}) {
		t.Fatalf("cursor %+v", snap.Cursor)
	}
	if snap.Text() != "hello\n        x\nwide: 日本" {
		t.Fatalf("text %q", snap.Text())
	}
	feed(t, s, "\x1b[?25l\x1b[2;5H")
	if c := s.Snapshot(0).Cursor; c != (Cursor{Row: 1, Col: 4, Visible: false}) {
		t.Fatalf("cursor after CUP and DECTCEM off: %+v", c)
	}
}

func TestScreenAltScreen(t *testing.T) {
	s := newScreen(t, 4, 20, 0, nil)
	feed(t, s, "$ primary")
	feed(t, s, "\x1b[?1049h\x1b[H\x1b[2Jfull screen\r\n~\r\n~")
	snap := s.Snapshot(0)
	if !snap.AltScreen || snap.Lines[0] != "full screen" || snap.Lines[1] != "~" {
		t.Fatalf("alt screen: %+v", snap)
	}
	feed(t, s, "\x1b[?1049l")
	snap = s.Snapshot(0)
	if snap.AltScreen || snap.Text() != "$ primary" || snap.Cursor.Col != len("$ primary") {
		t.Fatalf("after leaving the alt screen: %+v", snap)
	}
}

func TestScreenScrollback(t *testing.T) {
	s := newScreen(t, 3, 10, 2, nil)
	feed(t, s, "l1\r\nl2\r\nl3\r\nl4\r\nl5\r\nl6")
	snap := s.Snapshot(10)
	if strings.Join(snap.Lines, ",") != "l4,l5,l6" || strings.Join(snap.Scrollback, ",") != "l2,l3" {
		t.Fatalf("lines %q scrollback %q", snap.Lines, snap.Scrollback)
	}
	if got := s.Snapshot(1).Scrollback; len(got) != 1 || got[0] != "l3" {
		t.Fatalf("last 1 scrollback line: %q", got)
	}
	none := newScreen(t, 2, 10, 0, nil)
	feed(t, none, "a\r\nb\r\nc\r\nd")
	if got := none.Snapshot(5).Scrollback; len(got) != 0 {
		t.Fatalf("scrollback 0 reported %q", got)
	}
}

func TestScreenResize(t *testing.T) {
	s := newScreen(t, 24, 80, 0, nil)
	if err := s.Resize(40, 120); err != nil {
		t.Fatal(err)
	}
	if snap := s.Snapshot(0); snap.Rows != 40 || snap.Cols != 120 || len(snap.Lines) != 40 {
		t.Fatalf("after resize: %d×%d, %d lines", snap.Rows, snap.Cols, len(snap.Lines))
	}
	for _, sz := range [][2]int{{0, 80}, {1001, 80}, {24, 0}, {24, 1001}, {-1, 5}} {
		if err := s.Resize(sz[0], sz[1]); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("resize %v: %v", sz, err)
		}
		if _, err := NewScreen(ScreenConfig{Rows: sz[0], Cols: sz[1]}); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("new %v: %v", sz, err)
		}
	}
	if _, err := NewScreen(ScreenConfig{Rows: 1, Cols: 1, Scrollback: -1}); !errors.Is(err, ErrInvalidSize) {
		t.Errorf("scrollback -1: %v", err)
	}
}

// A query is answered through Reply, as a terminal answers on its input:
// programs that ask for the cursor position wait for the answer.
func TestScreenReplies(t *testing.T) {
	var mu sync.Mutex
	var got []byte
	s := newScreen(t, 24, 80, 0, func(b []byte) {
		mu.Lock()
		got = append(got, b...)
		mu.Unlock()
	})
	feed(t, s, "abc\x1b[6n")
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		r := string(got)
		mu.Unlock()
		if r == "\x1b[1;4R" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reply %q, want CPR 1;4", r)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Unanswered replies (nil Reply) never block a Write.
	quiet := newScreen(t, 24, 80, 0, nil)
	for range 1000 {
		feed(t, quiet, "\x1b[6n\x1b[c")
	}
	s.Close()
	if _, err := s.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write after close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// floods are byte streams a hostile or broken program may write.
var floods = map[string]func(i int) string{
	"unterminated OSC": func(i int) string { return "\x1b]0;" + strings.Repeat("t", 1000) },
	"CSI params":       func(i int) string { return "\x1b[" + strings.Repeat("1;", 500) + "m" },
	"combining marks":  func(i int) string { return "e" + strings.Repeat("\u0301", 400) },
	"DCS":              func(i int) string { return "\x1bP" + strings.Repeat("q", 1000) },
	"scrolling lines":  func(i int) string { return strings.Repeat("line of text\r\n", 80) },
	"alt screen flips": func(i int) string { return "\x1b[?1049h" + strings.Repeat("x", 900) + "\x1b[?1049l" },
}

// A flood of escape sequences keeps the emulator's memory bounded: the
// heap after 1 MiB of each flood stays within a fixed bound. (1 MiB, not
// more: the emulator scrolls at about 0.1 MB/s at this size, see the
// notes; a larger flood costs minutes.)
func TestScreenFloodMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("floods 1 MiB per pattern")
	}
	for name, gen := range floods {
		t.Run(name, func(t *testing.T) {
			s := newScreen(t, 24, 80, 100, nil)
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i, n := 0, 0; n < 1<<20; i++ {
				chunk := gen(i)
				feed(t, s, chunk)
				n += len(chunk)
			}
			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%s: heap grew %d KiB", name, grown>>10)
			if grown > 96<<20 {
				t.Fatalf("%s: heap grew %d MiB", name, grown>>20)
			}
			runtime.KeepAlive(s)
		})
	}
}

func FuzzScreen(f *testing.F) {
	for _, gen := range floods {
		f.Add([]byte(gen(0)[:min(200, len(gen(0)))]), uint8(3), uint8(7))
	}
	f.Add([]byte("\x1b[?1049h\x1b[5;5H\x1b[2J\x1b[?1h\x1b=\x1b[?2004h"), uint8(0), uint8(0))
	f.Add([]byte("日本\x1b[1;1H\x1b[@\x1b[P\x1b[L\x1b[M\x1b[3;2r\x1bD\x1bM\x1b7\x1b8"), uint8(10), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, rows, cols uint8) {
		s, err := NewScreen(ScreenConfig{Rows: 5, Cols: 11, Scrollback: 3, Reply: func([]byte) {}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		half := len(data) / 2
		s.Write(data[:half])
		r, c := int(rows%30)+1, int(cols%30)+1
		if err := s.Resize(r, c); err != nil {
			t.Fatal(err)
		}
		s.Write(data[half:])
		snap := s.Snapshot(3)
		if snap.Rows != r || snap.Cols != c || len(snap.Lines) != r || len(snap.Scrollback) > 3 {
			t.Fatalf("snapshot %d×%d with %d lines, %d scrollback; want %d×%d", snap.Rows, snap.Cols, len(snap.Lines), len(snap.Scrollback), r, c)
		}
		if snap.Cursor.Row < 0 || snap.Cursor.Row >= r || snap.Cursor.Col < 0 || snap.Cursor.Col > c {
			t.Fatalf("cursor %+v outside %d×%d", snap.Cursor, r, c)
		}
		_ = s.Modes()
	})
}

// go test -run '^$' -bench Snapshot ./sandbox/terminal/
//
// BenchmarkSnapshot is one snapshot of a full screen (every cell set)
// with 100 lines of scrollback.
func BenchmarkSnapshot(b *testing.B) {
	for _, sz := range [][2]int{{24, 80}, {60, 250}} {
		b.Run(fmt.Sprintf("%dx%d", sz[1], sz[0]), func(b *testing.B) {
			s := newScreen(b, sz[0], sz[1], 100, nil)
			line := strings.Repeat("x", sz[1]-1)
			for range sz[0] + 100 {
				s.Write([]byte(line + "\r\n"))
			}
			cpu := testutil.CPUTime()
			for b.Loop() {
				if snap := s.Snapshot(100); len(snap.Lines) != sz[0] {
					b.Fatal(len(snap.Lines))
				}
			}
			testutil.ReportCPU(b, cpu)
		})
	}
}

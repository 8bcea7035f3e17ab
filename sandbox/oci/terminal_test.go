package oci

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/terminal"
)

// termSpec runs argv in a container on a 24x80 terminal.
func (e *env) termSpec(argv ...string) sandbox.ProcessSpec {
	sp := e.spec(argv...)
	sp.Env = append(sp.Env, "TERM=dumb", "HOME=/tmp")
	sp.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen}
	sp.Terminal = &sandbox.TerminalSpec{Rows: 24, Cols: 80, Term: "xterm-256color"}
	return sp
}

// screenOf feeds a screen from l in the background, as the registry does.
func screenOf(t *testing.T, l sandbox.Log, rows, cols int) *terminal.Screen {
	t.Helper()
	s, err := terminal.NewScreen(terminal.ScreenConfig{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var off int64
		for {
			ch := l.Changed()
			c, err := l.ReadFrom(off, 1<<20)
			if err != nil {
				return
			}
			off += int64(len(c.Data))
			s.Write(c.Data)
			if len(c.Data) == 0 && l.Closed() {
				return
			}
			select {
			case <-stop: // the test ended first (a failure)
				return
			default:
			}
			if len(c.Data) == 0 {
				select {
				case <-ch:
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("screen feeder did not end")
		}
		s.Close()
	})
	return s
}

// awaitScreen polls the screen until its text matches re, bounded by d.
func awaitScreen(t *testing.T, s *terminal.Screen, re string, d time.Duration) terminal.Snapshot {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(d)
	for {
		snap := s.Snapshot(0)
		if rx.MatchString(snap.Text()) {
			return snap
		}
		if time.Now().After(deadline) {
			t.Fatalf("screen never matched %q; it shows:\n%s", re, snap.Text())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sendKeys(t *testing.T, h sandbox.Handle, s *terminal.Screen, keys ...terminal.Key) {
	t.Helper()
	b, err := terminal.EncodeKeys(keys, s.Modes())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.Stdin().Write(ctx, b); err != nil {
		t.Fatalf("stdin: %v", err)
	}
}

func text(s string) terminal.Key  { return terminal.Key{Text: s} }
func named(s string) terminal.Key { return terminal.Key{Name: s} }

// A shell in a container on runc's terminal (console socket): it is a
// tty with job control, keys typed reach it and its echo is on the
// screen, a resize shows in `stty size` (and SIGWINCH reaches it), C-c
// interrupts its foreground job, and the terminal ends with the
// container (resize refused, one stream).
func TestTerminalContainer(t *testing.T) { terminalContainer(t, newEnv(t, nil), `/dev/pts/\d+`) }

// The same under gVisor: runsc takes the same --console-socket, and its
// container's pid 1 is the shell itself (no capsule-oci-init under
// runsc), the session leader of the terminal. gVisor's /proc/self/fd/0
// does not name the pts (runsc 20221219), so `tty` says "not a tty" while
// isatty and the terminal's ioctls work: the test asks isatty there.
func TestTerminalContainerRunsc(t *testing.T) {
	runsc := runscPath()
	if runsc == "" {
		t.Skip("SKIP LOUDLY: runsc (gVisor) not found, so OCI terminals under runsc are not tested; see TestRunsc for how to enable it")
	}
	terminalContainer(t, newEnv(t, withRunsc(runsc)), `(/dev/pts/\d+|not a tty)`)
}

// terminalContainer is TestTerminalContainer's body; ttyName is what
// `tty` may print.
func terminalContainer(t *testing.T, e *env, ttyName string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, e.termSpec("/bin/sh", "-i"))
	if err != nil {
		t.Fatal(err)
	}
	e.cleanupAfter(t, h)
	s := screenOf(t, h.Stdout(), 24, 80)
	sendKeys(t, h, s, text("PS1='P''S1> '"), named("Enter"))
	awaitScreen(t, s, `(?m)^PS1>$`, 20*time.Second)
	sendKeys(t, h, s, text("echo T=$TERM; tty; [ -t 0 ] && echo is''atty; stty size"), named("Enter"))
	awaitScreen(t, s, `\nT=xterm-256color\n`+ttyName+`\nisatty\n24 80\nPS1>`, 10*time.Second)
	rz, ok := h.(sandbox.Resizer)
	if !ok {
		t.Fatal("an OCI handle is no sandbox.Resizer")
	}
	if err := rz.Resize(40, 120); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	s.Resize(40, 120)
	sendKeys(t, h, s, text("clear; stty size"), named("Enter"))
	awaitScreen(t, s, `(?m)^40 120$`, 10*time.Second)
	// C-c reaches the foreground job: the init gave its child the
	// terminal's foreground, and the shell gave it to sleep.
	// The job says it started: the shell gave it the terminal before it
	// ran (a C-c before that would reach the shell alone).
	sendKeys(t, h, s, text("sh -c 'echo start''ed; exec sleep 100'"), named("Enter"))
	awaitScreen(t, s, `(?m)^started$`, 10*time.Second)
	sendKeys(t, h, s, named("C-c"))
	awaitScreen(t, s, `\^C\nPS1>$`, 10*time.Second)
	sendKeys(t, h, s, text("echo rc=$?"), named("Enter"))
	awaitScreen(t, s, `(?m)^rc=130$`, 10*time.Second)
	sendKeys(t, h, s, text("exit 7"), named("Enter"))
	ex, err := h.Wait(ctx)
	if err != nil || ex.Code != 7 {
		t.Fatalf("Wait: %+v %v, want code 7", ex, err)
	}
	all := readAll(t, h.Stdout())
	if strings.Contains(all, "job control") || strings.Contains(all, "can't access tty") {
		t.Errorf("the shell has no controlling terminal: %q", all)
	}
	if !h.Stderr().Closed() || h.Stderr().End() != 0 {
		t.Errorf("stderr log: closed %v end %d, want closed and empty", h.Stderr().Closed(), h.Stderr().End())
	}
	if err := rz.Resize(10, 10); !errors.Is(err, sandbox.ErrNoTerminal) {
		t.Errorf("Resize after exit: %v, want ErrNoTerminal", err)
	}
}

// The refusals: a resize out of 1..1000, a pipe container's resize, a
// terminal with closed stdin.
func TestTerminalContainerRefused(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, e.termSpec("/bin/cat"))
	if err != nil {
		t.Fatal(err)
	}
	e.cleanupAfter(t, h)
	for _, sz := range [][2]uint16{{0, 80}, {1001, 80}, {24, 0}, {24, 1001}} {
		if err := h.(sandbox.Resizer).Resize(sz[0], sz[1]); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("Resize(%d, %d): %v, want ErrInvalidSpec", sz[0], sz[1], err)
		}
	}
	p, err := e.b.Start(ctx, e.spec("/bin/sleep", "5"))
	if err != nil {
		t.Fatal(err)
	}
	e.cleanupAfter(t, p)
	if err := p.(sandbox.Resizer).Resize(24, 80); !errors.Is(err, sandbox.ErrNoTerminal) {
		t.Errorf("Resize of a pipe container: %v, want ErrNoTerminal", err)
	}
	sp := e.termSpec("/bin/cat")
	sp.Stdin.Mode = sandbox.StdinClosed
	if _, err := e.b.Start(ctx, sp); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("terminal with closed stdin: %v, want ErrInvalidSpec", err)
	}
}

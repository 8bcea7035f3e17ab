package local_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// termSpec runs argv on a 24x80 terminal with open stdin.
func termSpec(t testing.TB, argv ...string) sandbox.ProcessSpec {
	sp := baseSpec(t, "")
	sp.Argv = argv
	sp.Env = append(sp.Env, "TERM=dumb", "HOME="+sp.Cwd)
	sp.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen}
	sp.Terminal = &sandbox.TerminalSpec{Rows: 24, Cols: 80, Term: "xterm-256color"}
	return sp
}

// startTerm starts sp and, at cleanup, kills it and waits for it.
func startTerm(t *testing.T, b sandbox.Backend, sp sandbox.ProcessSpec) sandbox.Handle {
	t.Helper()
	h, err := b.Start(bg(t), sp)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := h.Terminate(ctx, sandbox.Force); err != nil {
			t.Errorf("Terminate: %v", err)
		}
		b.Cleanup(ctx, h.Ref())
	})
	return h
}

// awaitOutput polls the log from off until re matches what follows off,
// and returns the offset just after the match. Bounded by d.
func awaitOutput(t *testing.T, l sandbox.Log, off int64, re string, d time.Duration) int64 {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	var seen []byte
	for {
		ch := l.Changed()
		c, err := l.ReadFrom(off+int64(len(seen)), 1<<20)
		if err != nil {
			t.Fatalf("ReadFrom: %v", err)
		}
		seen = append(seen, c.Data...)
		if loc := rx.FindIndex(seen); loc != nil {
			return off + int64(loc[1])
		}
		if l.Closed() && len(c.Data) == 0 {
			t.Fatalf("output closed without %q; got %q", re, seen)
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no %q within %v; got %q", re, d, seen)
		}
	}
}

func write(t *testing.T, h sandbox.Handle, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.Stdin().Write(ctx, []byte(s)); err != nil {
		t.Fatalf("stdin write %q: %v", s, err)
	}
}

func resize(t *testing.T, h sandbox.Handle, rows, cols uint16) error {
	t.Helper()
	r, ok := h.(sandbox.Resizer)
	if !ok {
		t.Fatalf("%T is not a sandbox.Resizer", h)
	}
	return r.Resize(rows, cols)
}

// bash -i on the PTY: a prompt with job control (a controlling tty: no
// "no job control" warning), TERM from the spec, the window size from
// the spec and from a resize, C-c interrupting a foreground sleep, and
// one stream (stderr's log empty and closed).
func TestTerminalBash(t *testing.T) {
	b := newBackend(t, local.Options{})
	h := startTerm(t, b, termSpec(t, "/bin/bash", "--norc", "--noprofile", "-i"))
	out := h.Stdout()
	write(t, h, "PS1='P''S1> '\r")
	off := awaitOutput(t, out, 0, `PS1> `, 20*time.Second)
	write(t, h, "echo T=$TERM; stty size; tty\r")
	// The prompt before the resize: readline re-sets the window size it
	// read as it starts a line, which can undo a resize made then.
	off = awaitOutput(t, out, off, `(?s)T=xterm-256color\r\n24 80\r\n/dev/pts/\d+\r\n.*PS1> `, 10*time.Second)
	if err := resize(t, h, 40, 120); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	write(t, h, "stty size\r")
	off = awaitOutput(t, out, off, `\r40 120\r\n`, 10*time.Second)
	// The foreground job says it started: bash gave it the terminal
	// before it runs (a C-c before that would reach bash alone).
	write(t, h, "sh -c 'echo start''ed; exec sleep 100'\r")
	off = awaitOutput(t, out, off, `started\r\n`, 10*time.Second)
	write(t, h, "\x03") // C-c: SIGINT to the foreground group, the list is abandoned
	off = awaitOutput(t, out, off, `(?s)\^C.*PS1> `, 10*time.Second)
	write(t, h, "echo rc=$?\r")
	awaitOutput(t, out, off, `rc=130\r\n`, 10*time.Second)
	write(t, h, "exit 7\r")
	ex, err := h.Wait(bg(t))
	if err != nil || ex.Code != 7 {
		t.Fatalf("Wait: %+v %v, want code 7", ex, err)
	}
	all, _ := out.ReadFrom(0, 1<<20)
	if bytes.Contains(all.Data, []byte("no job control")) {
		t.Errorf("bash has no controlling terminal: %q", all.Data)
	}
	if !h.Stderr().Closed() || h.Stderr().End() != 0 {
		t.Errorf("stderr log: closed %v end %d, want closed and empty", h.Stderr().Closed(), h.Stderr().End())
	}
	if err := resize(t, h, 10, 10); !errors.Is(err, sandbox.ErrNoTerminal) {
		t.Errorf("Resize after exit: %v, want ErrNoTerminal", err)
	}
}

// A program in raw mode reading one key: the byte arrives as typed (C-c
// is a byte, not a signal, without ISIG), and SIGWINCH reaches it.
func TestTerminalRawKeyAndWinch(t *testing.T) {
	b := newBackend(t, local.Options{})
	h := startTerm(t, b, termSpec(t, "/bin/bash", "-c",
		`trap 'echo winch $(stty size)' WINCH; stty raw -echo; echo ready; `+
			`k=$(dd bs=1 count=1 2>/dev/null | od -An -tx1); stty sane; echo "key:$k"; `+
			`while :; do sleep 0.05; done`))
	out := h.Stdout()
	off := awaitOutput(t, out, 0, `ready`, 10*time.Second)
	write(t, h, "\x03")
	off = awaitOutput(t, out, off, `key: 03\r\n`, 10*time.Second)
	if err := resize(t, h, 33, 91); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	awaitOutput(t, out, off, `winch 33 91\r\n`, 10*time.Second)
}

func TestTerminalResizeRefused(t *testing.T) {
	b := newBackend(t, local.Options{})
	h := startTerm(t, b, termSpec(t, "/bin/cat"))
	for _, sz := range [][2]uint16{{0, 80}, {1001, 80}, {24, 0}, {24, 1001}} {
		if err := resize(t, h, sz[0], sz[1]); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("Resize(%d, %d): %v, want ErrInvalidSpec", sz[0], sz[1], err)
		}
	}
	sp := baseSpec(t, "sleep 5")
	p := startTerm(t, b, sp)
	if err := resize(t, p, 24, 80); !errors.Is(err, sandbox.ErrNoTerminal) {
		t.Errorf("Resize of a pipe process: %v, want ErrNoTerminal", err)
	}
	sp = termSpec(t, "/bin/cat")
	sp.Stdin.Mode = sandbox.StdinClosed
	if _, err := b.Start(bg(t), sp); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("terminal with closed stdin: %v, want ErrInvalidSpec", err)
	}
}

// A terminal process leaves no descriptor behind: the slave is closed
// after the fork, the master's two descriptors by their owners.
func TestTerminalNoFDLeak(t *testing.T) {
	b := newBackend(t, local.Options{})
	run := func() {
		sp := termSpec(t, "/bin/sh", "-c", "read x; echo got $x")
		h, err := b.Start(bg(t), sp)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		write(t, h, "hi\r")
		if ex, err := h.Wait(bg(t)); err != nil || ex.Code != 0 {
			t.Fatalf("Wait: %+v %v", ex, err)
		}
		if err := b.Cleanup(bg(t), h.Ref()); err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
	}
	run() // warm up the runtime's own descriptors (epoll, pidfd probe)
	before := fds(t)
	for range 5 {
		run()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		extra := newFDs(before, fds(t))
		if len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("descriptors open after 5 terminal processes that were not before: %v", extra)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fds maps this process's open descriptors to what they name, leaving
// out the pooled cgroups' (three each: the group, cgroup.procs and
// cpu.stat). The pool grows, up to its bound, when a spawn finds it empty
// because the last process's group is not back yet: a loaded CI run saw
// exactly one pooled group appear during the five runs.
func fds(t *testing.T) map[string]string {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	self := fmt.Sprintf("/proc/%d/fd", os.Getpid()) // the listing's own descriptor
	pooled := regexp.MustCompile("/" + regexp.QuoteMeta(local.PoolGroupPrefix()) + `\d+(/|$)`)
	m := make(map[string]string, len(es))
	for _, e := range es {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || target == self || pooled.MatchString(target) {
			continue // closed since the listing, the listing, or a pooled group
		}
		m[e.Name()] = target
	}
	return m
}

// newFDs lists the descriptors of after that before did not have (by
// number and target: a number reused for another file counts).
func newFDs(before, after map[string]string) []string {
	var out []string
	for fd, target := range after {
		if before[fd] != target {
			out = append(out, fd+" -> "+target)
		}
	}
	sort.Strings(out)
	return out
}

// The PTY hangs up when the session leader exits: a background child
// that keeps the slave gets SIGHUP, and the settle bound ends the rest.
func TestTerminalLeaderExitSettles(t *testing.T) {
	b := newBackend(t, local.Options{})
	sp := termSpec(t, "/bin/sh", "-c", "sleep 100 & echo started; exit 3")
	h := startTerm(t, b, sp)
	ex, err := h.Wait(bg(t))
	if err != nil || ex.Code != 3 {
		t.Fatalf("Wait: %+v %v, want code 3", ex, err)
	}
	all, _ := h.Stdout().ReadFrom(0, 1<<10)
	if !strings.Contains(string(all.Data), "started") {
		t.Errorf("output %q", all.Data)
	}
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("Signal after exit: %v", err)
	}
}

package bwrap

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// A terminal process under bwrap: its PTY is its controlling terminal
// inside the sandbox (job control: C-c reaches the foreground job), the
// window size and a resize are seen, and only terminal runs keep their
// session (no --new-session).
func TestTerminalInSandbox(t *testing.T) {
	e := newEnv(t)
	sp := e.spec("")
	sp.Argv = []string{"/bin/bash", "--norc", "--noprofile", "-i"}
	sp.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen}
	sp.Terminal = &sandbox.TerminalSpec{Rows: 24, Cols: 80, Term: "xterm"}
	args, err := e.b.Args(sp)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(args, "--new-session") {
		t.Errorf("terminal run has --new-session: %q", args)
	}
	if pipeArgs, _ := e.b.Args(e.spec("true")); !slices.Contains(pipeArgs, "--new-session") {
		t.Errorf("pipe run lacks --new-session: %q", pipeArgs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := e.b.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		h.Terminate(ctx, sandbox.Force)
		e.b.Cleanup(ctx, h.Ref())
	}()
	send := func(s string) {
		t.Helper()
		if _, err := h.Stdin().Write(ctx, []byte(s)); err != nil {
			t.Fatalf("write %q: %v", s, err)
		}
	}
	out := h.Stdout()
	send("PS1='P''S1> '\r")
	off := awaitLog(t, out, 0, `PS1> `)
	send("[ -t 0 ] && echo is''atty; stty size\r")
	// The prompt after stty's output, before the resize: readline
	// reads and re-sets the window size as it starts a line (rltty.c's
	// set_winsize), which can undo a resize made in that instant.
	off = awaitLog(t, out, off, `(?s)isatty\r\n24 80\r\n.*PS1> `)
	if err := h.(sandbox.Resizer).Resize(50, 132); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	send("stty size\r")
	off = awaitLog(t, out, off, `\r50 132\r\n`)
	send("sh -c 'echo start''ed; exec sleep 100'\r")
	off = awaitLog(t, out, off, `started\r\n`)
	send("\x03")
	off = awaitLog(t, out, off, `(?s)\^C.*PS1> `)
	send("echo rc=$?; exit 5\r")
	awaitLog(t, out, off, `rc=130\r\n`)
	if ex, err := h.Wait(ctx); err != nil || ex.Code != 5 {
		t.Fatalf("Wait: %+v %v, want code 5", ex, err)
	}
}

// awaitLog polls l from off until re matches, bounded; returns the
// offset after the match.
func awaitLog(t *testing.T, l sandbox.Log, off int64, re string) int64 {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.NewTimer(20 * time.Second)
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
			t.Fatalf("no %q; got %q", re, seen)
		}
	}
}

package keeper_test

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// A terminal process in the keeper survives its daemon: a new Backend
// value (the restarted daemon) attaches from the Ref, the shell keeps its
// state, and its PTY takes input and a resize.
func TestTerminalSurvivesDaemon(t *testing.T) {
	dir := newDir(t)
	startKeeper(t, dir)
	ctx := ctxT(t, 60*time.Second)
	marker := filepath.Base(dir)
	sp := spec(marker, "/usr/bin/bash", "--norc", "--noprofile", "-i", "-s", marker)
	sp.Stdin.Mode = sandbox.StdinOpen
	sp.Terminal = &sandbox.TerminalSpec{Rows: 24, Cols: 80, Term: "xterm"}
	b1, err := keeper.NewBackend(keeper.Config{Dir: dir, Name: "keeper"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := b1.Start(ctx, sp)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	send(t, ctx, h, "PS1='P''S1> '; X=ke''pt; stty size\r")
	// The prompt too: readline re-sets the window size it read as it
	// starts a line, which could undo the resize below.
	awaitRe(t, h.Stdout(), `(?s)\r24 80\r\n.*PS1> `)
	if err := h.(sandbox.Resizer).Resize(0, 80); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("Resize(0, 80): %v, want ErrInvalidSpec", err)
	}
	ref := h.Ref()
	h.Release()
	b1.Close(ctx, false)

	b2, err := keeper.NewBackend(keeper.Config{Dir: dir, Name: "keeper"})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := b2.Attach(ctx, ref)
	if err != nil {
		t.Fatalf("Attach after the restart: %v", err)
	}
	defer h2.Terminate(ctx, sandbox.Force)
	if err := h2.(sandbox.Resizer).Resize(40, 100); err != nil {
		t.Fatalf("Resize after the restart: %v", err)
	}
	send(t, ctx, h2, "echo X=$X; stty size\r")
	awaitRe(t, h2.Stdout(), `X=kept\r\n40 100\r\n`)
	send(t, ctx, h2, "exit 4\r")
	if ex, err := h2.Wait(ctx); err != nil || ex.Code != 4 {
		t.Fatalf("Wait: %+v %v, want code 4", ex, err)
	}
	if err := h2.(sandbox.Resizer).Resize(10, 10); !errors.Is(err, sandbox.ErrNoTerminal) {
		t.Errorf("Resize after exit: %v, want ErrNoTerminal", err)
	}
	// A pipe process has no terminal to resize.
	p, err := b2.Start(ctx, spec(marker, sleeperArgv(marker)...))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(ctx, sandbox.Force)
	if err := p.(sandbox.Resizer).Resize(10, 10); !errors.Is(err, sandbox.ErrNoTerminal) {
		t.Errorf("Resize of a pipe process: %v, want ErrNoTerminal", err)
	}
}

func send(t *testing.T, ctx context.Context, h sandbox.Handle, s string) {
	t.Helper()
	if _, err := h.Stdin().Write(ctx, []byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

func awaitRe(t *testing.T, l sandbox.Log, re string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	waitFor(t, l, 20*time.Second, rx.Match)
}

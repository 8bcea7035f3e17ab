package registry

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The operator drives another principal's terminal: send, paste, screen,
// wait-for; a pipe process is refused; an unknown ID is no-such-process.
func TestOperatorTerminal(t *testing.T) {
	e, ctx := termEnv(t)
	id := e.spawnTerm(ctx, 24, 80, "/bin/sh")
	defer e.r.Signal(ctx, id, SigKill)
	op := context.Background()
	if _, err := e.r.OperatorWaitFor(op, id, WaitCondition{Kind: WaitInput}, 20*time.Second); err != nil {
		t.Fatalf("operator wait-for input: %v", err)
	}
	if _, err := e.r.OperatorPaste(op, id, []byte("echo op-$((6*7))"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.OperatorWaitFor(op, id, WaitCondition{Kind: WaitOutput, Stream: Stdout, Cursor: e.startCursor(id, Stdout), Regex: `op-42`}, 20*time.Second); err != nil {
		t.Fatalf("operator wait-for output: %v", err)
	}
	scr, err := e.r.OperatorSnapshot(op, id, 0)
	if err != nil || !strings.Contains(scr.Text(), "op-42") {
		t.Fatalf("operator screen %q, %v", scr.Text(), err)
	}
	if _, err := e.r.OperatorSendKeys(op, id, keys("C-d")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.OperatorWaitFor(op, id, WaitCondition{Kind: WaitExit}, 20*time.Second); err != nil {
		t.Fatalf("operator wait-for exit after C-d: %v", err)
	}
	pipe := e.spawn(as("term", "alice"), "exec sleep 100", PersistOptions{})
	defer e.r.Signal(ctx, pipe, SigKill)
	if _, err := e.r.OperatorSnapshot(op, pipe, 0); !isErr(err, ErrInvalidInput) {
		t.Errorf("operator screen of a pipe process: %v, want invalid-input", err)
	}
	if _, err := e.r.OperatorWaitFor(op, "no-such-id", WaitCondition{Kind: WaitExit}, time.Second); !isErr(err, ErrNoSuchProcess) {
		t.Errorf("operator wait-for unknown ID: %v, want no-such-process", err)
	}
}

// Send-and-screen: the reaction is the first output after the mark,
// rendered (cat's echo); none within settle is quiet, with the screen;
// the bound passing first is timeout; a pipe process and an unknown ID
// are refused as send-keys refuses them. The echo case waits up to 20 s
// of settle: it checks what reacted means, not how fast.
func TestOperatorAwaitReaction(t *testing.T) {
	e, ctx := termEnv(t)
	op := context.Background()
	react := func(id string, settle, bound time.Duration, k ...string) (Screen, Reaction) {
		t.Helper()
		m, err := e.r.OperatorMarkInput(id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.r.OperatorSendKeys(op, id, keys(k...)); err != nil {
			t.Fatal(err)
		}
		s, how, err := e.r.OperatorAwaitReaction(op, id, m, settle, bound)
		if err != nil {
			t.Fatal(err)
		}
		return s, how
	}
	cat := e.spawnTerm(ctx, 24, 80, "/bin/cat")
	defer e.r.Signal(ctx, cat, SigKill)
	if _, err := e.r.OperatorWaitFor(op, cat, WaitCondition{Kind: WaitInput}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if s, how := react(cat, 20*time.Second, 30*time.Second, "h", "i"); how != ReactedOutput || !strings.HasPrefix(s.Text(), "h") {
		t.Errorf("cat's echo: reaction %d, screen %q", how, s.Text())
	}
	silent := e.spawnTerm(ctx, 24, 80, "/bin/sh", "-c", "stty -echo; exec cat")
	defer e.r.Signal(ctx, silent, SigKill)
	if _, err := e.r.OperatorWaitFor(op, silent, WaitCondition{Kind: WaitInput}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if s, how := react(silent, 20*time.Millisecond, 20*time.Second, "z"); how != ReactedQuiet || strings.Contains(s.Text(), "z") {
		t.Errorf("no echo: reaction %d, screen %q; want quiet", how, s.Text())
	}
	if _, how := react(silent, 30*time.Second, 30*time.Millisecond, "z"); how != ReactedTimeout {
		t.Errorf("past the bound: reaction %d; want timeout", how)
	}
	pipe := e.spawn(as("term", "alice"), "exec sleep 100", PersistOptions{})
	defer e.r.Signal(ctx, pipe, SigKill)
	if _, err := e.r.OperatorMarkInput(pipe); !isErr(err, ErrInvalidInput) {
		t.Errorf("mark of a pipe process: %v, want invalid-input", err)
	}
	if _, _, err := e.r.OperatorAwaitReaction(op, "no-such-id", InputMark{}, time.Millisecond, time.Second); !isErr(err, ErrNoSuchProcess) {
		t.Errorf("await of an unknown ID: %v, want no-such-process", err)
	}
}

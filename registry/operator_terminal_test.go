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

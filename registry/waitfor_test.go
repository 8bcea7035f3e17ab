package registry

import (
	"context"
	"strings"
	"testing"
	"time"
)

// startCursor is a read-since cursor at the start of a stream (the WIT
// guest gets one from read-since; here the test mints it).
func (e *env) startCursor(id string, s Stream) *string {
	c := e.r.encodeCursor(e.r.keyOf(id), s, 0)
	return &c
}

func (e *env) waitFor(ctx context.Context, id string, c WaitCondition, want WaitKind) WaitResult {
	e.t.Helper()
	res, err := e.r.WaitFor(ctx, id, c, 20*time.Second)
	if err != nil {
		e.t.Fatalf("wait-for %+v: %v", c, err)
	}
	if res.Fired != want {
		e.t.Fatalf("wait-for fired %d, want %d", res.Fired, want)
	}
	return res
}

// awaitInfo polls Status until ok holds, bounded.
func (e *env) awaitInfo(ctx context.Context, id, what string, ok func(Info) bool) Info {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		in, err := e.r.Status(ctx, id)
		if err != nil {
			e.t.Fatalf("status: %v", err)
		}
		if ok(in) {
			return in
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s never held: %+v", what, in)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The python3 REPL on a terminal: wait-for sees the prompt; input-wait
// holds at the idle prompt and not while it computes.
func TestWaitForPythonREPL(t *testing.T) {
	needPython3(t)
	e, ctx := termEnv(t)
	id := e.spawnTerm(ctx, 24, 80, python3, "-q")
	defer e.r.Signal(ctx, id, SigKill)
	e.waitFor(ctx, id, WaitCondition{Kind: WaitOutput, Stream: Stdout, Cursor: e.startCursor(id, Stdout), Regex: `>>> $`}, WaitOutput)
	e.waitFor(ctx, id, WaitCondition{Kind: WaitInput}, WaitInput)
	in := e.awaitInfo(ctx, id, "waiting-for-input at the prompt", func(in Info) bool { return in.WaitingForInput != nil && *in.WaitingForInput })
	if in.Terminal == nil || in.Terminal.Rows != 24 || in.Terminal.Cols != 80 || in.Terminal.Term != DefaultTerm {
		t.Errorf("terminal info %+v, want 24x80 %s", in.Terminal, DefaultTerm)
	}
	// Lists carry the terminal but do not sample input-wait (info.go).
	if ls, err := e.r.List(ctx, nil); err != nil || len(ls) != 1 || ls[0].Terminal == nil || ls[0].WaitingForInput != nil {
		t.Errorf("List: %+v, %v; want the terminal and no input-wait sample", ls, err)
	}
	if ls := e.r.OperatorList(OperatorFilter{}); len(ls) != 1 || ls[0].WaitingForInput != nil {
		t.Errorf("OperatorList: %+v; want no input-wait sample", ls)
	}
	before, err := e.r.ReadSince(ctx, id, Stdout, nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Paste(ctx, id, []byte("sum(range(10**8))"), true); err != nil {
		t.Fatal(err)
	}
	e.awaitInfo(ctx, id, "not waiting for input while computing", func(in Info) bool {
		if c, _ := e.r.ReadSince(ctx, id, Stdout, &before.Next, 1<<20); strings.Contains(string(c.Data), "4999999950000000") {
			t.Fatal("the sum finished before input-wait was seen false")
		}
		return in.WaitingForInput != nil && !*in.WaitingForInput
	})
	res := e.waitFor(ctx, id, WaitCondition{Kind: WaitOutput, Stream: Stdout, Cursor: &before.Next, Regex: `(?s)4999999950000000.*>>> `}, WaitOutput)
	e.waitFor(ctx, id, WaitCondition{Kind: WaitInput}, WaitInput)
	if c, err := e.r.ReadSince(ctx, id, Stdout, &res.Cursor, 1<<20); err != nil || len(c.Data) != 0 {
		t.Errorf("after the match's cursor: %q, %v; want nothing (the prompt ends the output)", c.Data, err)
	}
	if err := e.r.Resize(ctx, id, 30, 100); err != nil {
		t.Fatal(err)
	}
	if in, _ := e.r.Status(ctx, id); in.Terminal == nil || in.Terminal.Rows != 30 || in.Terminal.Cols != 100 {
		t.Errorf("terminal info after resize %+v, want 30x100", in.Terminal)
	}
}

// wait-for on a pipe process: output, input-wait, quiet, exit, and the
// refusals (invalid regex named, timeout, a condition that can no longer
// hold).
func TestWaitForPipe(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	id := e.spawn(ctx, `echo ready; read x; echo "got $x"; sleep 0.3; echo done`, PersistOptions{KeepStdinOpen: true})
	defer e.r.Signal(ctx, id, SigKill)
	in := e.awaitInfo(ctx, id, "a reap deadline", func(in Info) bool { return in.ReapIn != nil })
	if in.ReapRule == nil || in.Terminal != nil {
		t.Errorf("info %+v: want a reap rule and no terminal", in)
	}
	if _, err := e.r.WaitFor(ctx, id, WaitCondition{Kind: WaitOutput, Stream: Stdout, Regex: "("}, time.Second); !isErr(err, ErrInvalidInput) || !strings.Contains(err.Error(), `"("`) {
		t.Errorf("invalid regex: %v, want invalid-input naming it", err)
	}
	if _, err := e.r.WaitFor(ctx, id, WaitCondition{Kind: WaitOutput, Stream: Stdout, Regex: "never-printed"}, 50*time.Millisecond); !isErr(err, ErrWaitTimeout) {
		t.Errorf("no match in time: %v, want wait-timeout", err)
	}
	res := e.waitFor(ctx, id, WaitCondition{Kind: WaitOutput, Stream: Stdout, Cursor: e.startCursor(id, Stdout), Regex: `read+y`}, WaitOutput)
	e.waitFor(ctx, id, WaitCondition{Kind: WaitInput}, WaitInput)
	if _, err := e.r.WriteStdin(ctx, id, []byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	res = e.waitFor(ctx, id, WaitCondition{Kind: WaitOutput, Stream: Stdout, Cursor: &res.Cursor, Regex: `got hi\n`}, WaitOutput)
	e.waitFor(ctx, id, WaitCondition{Kind: WaitQuiet, Quiet: 100 * time.Millisecond}, WaitQuiet)
	e.waitFor(ctx, id, WaitCondition{Kind: WaitExit}, WaitExit)
	if _, err := e.r.WaitFor(ctx, id, WaitCondition{Kind: WaitOutput, Stream: Stdout, Cursor: &res.Cursor, Regex: "got"}, 5*time.Second); !isErr(err, ErrClosed) {
		t.Errorf("no match before the end of output: %v, want closed", err)
	}
	if _, err := e.r.WaitFor(ctx, id, WaitCondition{Kind: WaitInput}, 5*time.Second); !isErr(err, ErrClosed) {
		t.Errorf("input-wait after the exit: %v, want closed", err)
	}
	if in, _ := e.r.Status(ctx, id); in.ReapIn != nil || in.WaitingForInput != nil {
		t.Errorf("exited info %+v: want no reap deadline, no input-wait", in)
	}
}

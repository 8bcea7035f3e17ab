package keeper

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// feedBackend is a keeper of the test's own and a backend on it, closed
// at the test's end; ctx bounds the test.
func feedBackend(t *testing.T) (context.Context, string, *Backend) {
	dir, _ := internalKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	b, err := NewBackend(Config{Dir: dir, Name: "keeper"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(ctx, true) })
	return ctx, dir, b
}

// TestWatch: a handle's Watch reports each stream's progress and the
// settling from the feed, with the state in the call; a Watch of a
// settled handle calls back at once with Done; stop unregisters it from
// the feed; against a keeper without the feed Watch says !ok.
func TestWatch(t *testing.T) {
	ctx, dir, b := feedBackend(t)
	c, err := Dial(ctx, dir) // the test's own connection, for stdin
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := func() sandbox.Handle {
		h, err := b.Start(ctx, feedSpec())
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := start()
	states := make(chan sandbox.WatchState, 64)
	stop, ok := h.(sandbox.Watchable).Watch(func(st sandbox.WatchState) {
		select {
		case states <- st:
		default:
		}
	})
	if !ok {
		t.Fatal("Watch: not ok against a keeper with the feed")
	}
	if _, err := c.WriteStdin(ctx, h.Ref(), []byte("abcdefgh\n")); err != nil {
		t.Fatal(err)
	}
	line := int64(len("out abcdefgh\n"))
	var last sandbox.WatchState
	for !(last.Done && last.Stdout.End == line && last.Stderr.End == line && last.Stdout.Closed) {
		select {
		case last = <-states:
		case <-ctx.Done():
			t.Fatalf("the watch never reported the end: last %+v", last)
		}
	}
	stop()
	hub := &h.(*handle).logs[0].c.hub
	hub.mu.Lock()
	left := len(hub.procs[h.Ref().ID])
	hub.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d watchers left after stop", left)
	}
	// A settled handle: at once, with Done.
	got := make(chan sandbox.WatchState, 1)
	f := func(st sandbox.WatchState) {
		select {
		case got <- st:
		default: // f must not block; a second call is allowed
		}
	}
	if _, ok := h.(sandbox.Watchable).Watch(f); !ok {
		t.Fatal("Watch of a settled handle: not ok")
	}
	select {
	case st := <-got:
		if !st.Done {
			t.Fatalf("Watch of a settled handle: %+v, want Done", st)
		}
	default:
		t.Fatal("Watch of a settled handle did not call back before returning")
	}
	// No feed (an older keeper): the caller waits on the channels.
	h2 := start()
	h2.(*handle).logs[0].c.hub.end(fmt.Errorf("test: %w", ErrProtocol), true)
	if _, ok := h2.(sandbox.Watchable).Watch(func(sandbox.WatchState) {}); ok {
		t.Fatal("Watch without the feed: ok, want !ok")
	}
	h2.Terminate(ctx, sandbox.Force)
}

// feedSpec waits for a line of stdin, writes one line to each stream and
// exits 7 (as feedProcs).
func feedSpec() sandbox.ProcessSpec {
	return sandbox.ProcessSpec{Argv: []string{"/bin/sh", "-c", "read x; echo out $x; echo err $x >&2; exit 7", "keeper-test-feed"}, Cwd: "/",
		Stdin:  sandbox.StdinSpec{Mode: sandbox.StdinOpen},
		Output: sandbox.OutputSpec{RingBytes: 4096, Overflow: sandbox.DropOldest}, Grace: time.Second, Drain: time.Second}
}

// TestSettleFromFeed: the feed's report of a recorded exit settles a
// handle with that exit and the streams' final state, with no request of
// its own: neither a wait nor a read of End or Closed afterwards.
func TestSettleFromFeed(t *testing.T) {
	var mu sync.Mutex
	ops := map[string]int{}
	count := func(op string) {
		mu.Lock()
		ops[op]++
		mu.Unlock()
	}
	onCall.Store(&count)
	t.Cleanup(func() { onCall.Store(nil) })
	ctx, _, b := feedBackend(t)
	h, err := b.Start(ctx, feedSpec())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Stdin().Write(ctx, []byte("abcdefgh\n")); err != nil {
		t.Fatal(err)
	}
	x, err := h.Wait(ctx)
	if err != nil || x.Code != 7 {
		t.Fatalf("exit %+v, %v; want code 7", x, err)
	}
	line := int64(len("out abcdefgh\n"))
	for _, l := range []sandbox.Log{h.Stdout(), h.Stderr()} {
		if l.End() != line || !l.Closed() {
			t.Fatalf("after the exit: End %d Closed %v, want %d true", l.End(), l.Closed(), line)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for op, n := range ops {
		switch op {
		case "start", "write_stdin", "watch_all", "hello": // the path's own, and the feed
		default:
			t.Errorf("%d %s requests: a round trip the feed's report should have saved", n, op)
		}
	}
}

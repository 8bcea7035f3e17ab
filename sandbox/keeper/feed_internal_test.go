package keeper

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// feedProcs starts n processes that each wait for a line of stdin, then
// write one line to each stream and exit 7.
func feedProcs(t *testing.T, ctx context.Context, c *Client, n int) []sandbox.Ref {
	t.Helper()
	refs := make([]sandbox.Ref, n)
	for i := range refs {
		st, err := c.Start(ctx, feedSpec())
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = st.Ref
	}
	return refs
}

// follow arms every stream's Changed and an exit waiter for each ref,
// then wakes the processes and checks that every wake-up comes with the
// state the process reached.
func follow(t *testing.T, ctx context.Context, c *Client, refs []sandbox.Ref, feed bool) {
	t.Helper()
	type watched struct {
		out, err *RemoteLog
		chOut    <-chan struct{}
		chErr    <-chan struct{}
		exited   chan struct{}
		reported **procChange // what the feed's exit callback got, set before exited closes
	}
	ws := make([]watched, len(refs))
	for i, ref := range refs {
		w := watched{out: c.Log(ref, Stdout), err: c.Log(ref, Stderr), exited: make(chan struct{})}
		w.chOut, w.chErr = w.out.Changed(), w.err.Changed()
		w.reported = new(*procChange)
		exited, reported := w.exited, w.reported
		got, _ := c.hub.onExit(ref.ID, func(pc *procChange) {
			*reported = pc
			close(exited)
		})
		if got != feed {
			t.Fatalf("onExit registered %v, want %v", got, feed)
		}
		if !feed {
			go func() {
				if _, err := c.Wait(ctx, ref); err == nil {
					close(exited)
				}
			}()
		}
		ws[i] = w
	}
	if feed {
		// One watch_all follows them all: nothing else is in flight.
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n > 1 {
			t.Fatalf("%d requests in flight to follow %d processes, want the one watch_all", n, len(refs))
		}
	}
	for _, ref := range refs {
		if _, err := c.WriteStdin(ctx, ref, []byte(fmt.Sprintf("%s\n", ref.ID[:8]))); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range ws {
		for _, ch := range []<-chan struct{}{w.chOut, w.chErr, w.exited} {
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("process %d: no wake-up", i)
			}
		}
		// The feed reports the recorded exit itself: the handle settles
		// without a wait round trip.
		if pc := *w.reported; feed && (pc == nil || pc.Exit == nil || pc.Exit.Code != 7 || pc.Exit.Reason != ReasonExited) {
			t.Fatalf("process %d: the feed reported %+v, want the recorded exit 7", i, pc)
		}
		// The wake-up brought the state: the first line is in End
		// without another round trip (or the stream moved on since).
		want := int64(len("out \n") + 8)
		for _, l := range []*RemoteLog{w.out, w.err} {
			l.mu.Lock()
			end := l.state.End
			l.mu.Unlock()
			if end != want && l.End() != want {
				t.Fatalf("process %d %s: End %d, want %d", i, l.stream, end, want)
			}
		}
		x, err := c.Wait(ctx, refs[i])
		if err != nil || x.Code != 7 {
			t.Fatalf("process %d: exit %+v, %v", i, x, err)
		}
	}
}

// TestFeedFollowsManyWithOneRequest: a client follows every stream and
// exit of many processes with one request in flight, and each wake-up
// carries the state it is about.
func TestFeedFollowsManyWithOneRequest(t *testing.T) {
	dir, _ := internalKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	refs := feedProcs(t, ctx, c, 40)
	follow(t, ctx, c, refs, true)
	// A removal reaches the feed as gone: the hub forgets the process.
	if err := c.Cleanup(ctx, refs[0]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.hub.mu.Lock()
		_, known := c.hub.state[refs[0].ID]
		c.hub.mu.Unlock()
		if !known {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the feed never reported the removal")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A new connection starts with a full snapshot of what is left.
	c2, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	var res watchAllResult
	if err := c2.call(ctx, opWatchAll, watchAllArgs{}, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Full || len(res.Procs) != len(refs)-1 {
		t.Fatalf("snapshot: full %v, %d processes, want %d", res.Full, len(res.Procs), len(refs)-1)
	}
	for _, pc := range res.Procs {
		if !pc.Exited || !pc.Stdout.Closed || pc.Gone {
			t.Fatalf("snapshot of a finished process: %+v", pc)
		}
	}
}

// TestFeedFallback: against a keeper without watch_all (an older one,
// which answers an unknown operation with ErrProtocol) a client follows
// with one watch and one wait per process, as before the feed.
func TestFeedFallback(t *testing.T) {
	dir, _ := internalKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.call(ctx, "watch_everything", watchAllArgs{}, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("an unknown operation: %v, want ErrProtocol (what the hub takes for no feed)", err)
	}
	c.hub.end(fmt.Errorf("test: %w", ErrProtocol), true)
	follow(t, ctx, c, feedProcs(t, ctx, c, 5), false)
}

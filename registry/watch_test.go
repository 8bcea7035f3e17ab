package registry

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// TestKeeperHeldWatchedByCallback: keeper-held processes are watched by
// the keeper's feed calling back (sandbox.Watchable), not by a goroutine
// each (issue 11's per-process cost): 40 live processes add far fewer
// than 40 goroutines, and every one still gets its log-ready events (one
// per stream, coalesced until consumed, then again for later output) and
// its exited event with the real code; afterwards the goroutines are
// back where they were.
func TestKeeperHeldWatchedByCallback(t *testing.T) {
	const n = 40
	dir, keys := durableDir(t, "regwatch-")
	kdir := filepath.Join(dir, "keeper")
	os.Mkdir(kdir, 0o700)
	jr, _, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kb, err := keeper.NewBackend(keeper.Config{Dir: kdir, Name: "local"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) {
		c.Persistent = map[string]sandbox.Backend{"local": kb}
		c.Journal, c.Keys = jr, keys
		c.Quotas = Quotas{MaxConcurrent: n + 1, MaxRetained: n + 8, MaxEntries: n + 8}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e.r.Shutdown(ctx)
		kb.Close(ctx, true)
		jr.Close()
	})
	ctx := as("cap", "alice")
	script := `read x; echo out $x; echo err $x >&2; read y; echo again $y; exit 3`
	keep := PersistOptions{KeepStdinOpen: true}
	// The first process starts the keeper, its connection and its feed.
	warm := e.spawn(ctx, script, keep)
	for _, in := range []string{"w\n", "w\n"} {
		if _, err := e.r.WriteStdin(ctx, warm, []byte(in)); err != nil {
			t.Fatal(err)
		}
	}
	e.wait(ctx, warm)
	settle := func(what string, ok func(int) bool) int {
		deadline := time.Now().Add(30 * time.Second)
		for {
			g := runtime.NumGoroutine()
			if ok(g) {
				return g
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d goroutines", what, g)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	base := settle("before the spawns", func(int) bool { return true })
	time.Sleep(200 * time.Millisecond) // transient goroutines of the warm-up end
	base = min(base, runtime.NumGoroutine())
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.spawn(ctx, script, keep)
	}
	if g := settle("with 40 live processes", func(g int) bool { return g < base+n/4 }); g >= base+n/4 {
		t.Fatalf("%d goroutines for %d live keeper-held processes (base %d): a goroutine per process", g, n, base)
	}
	for _, id := range ids {
		if _, err := e.r.WriteStdin(ctx, id, []byte("one\n")); err != nil {
			t.Fatal(err)
		}
	}
	// Each stream's first output: one log-ready each, from the callbacks.
	want := map[string]bool{}
	for _, id := range ids {
		want[id+"/0"], want[id+"/1"] = true, true
	}
	cursor := drainEvents(t, e, ctx, 0, func(ev Event) bool {
		if ev.Kind == EventLogReady {
			delete(want, fmt.Sprintf("%s/%d", ev.ID, ev.Stream))
		}
		return len(want) == 0
	})
	// Consumed, so later output gets another; then the exits.
	for _, id := range ids {
		if _, err := e.r.WriteStdin(ctx, id, []byte("two\n")); err != nil {
			t.Fatal(err)
		}
	}
	again, exited := map[string]bool{}, map[string]bool{}
	drainEvents(t, e, ctx, cursor, func(ev Event) bool {
		switch {
		case ev.Kind == EventLogReady && ev.Stream == Stdout:
			again[ev.ID] = true
		case ev.Kind == EventExited:
			if ev.Exit.Code == nil || *ev.Exit.Code != 3 {
				t.Fatalf("exited event of %s: %+v, want code 3", ev.ID[:8], ev.Exit)
			}
			exited[ev.ID] = true
		}
		return len(again) == n && len(exited) == n
	})
	for _, id := range ids {
		if got := e.readUntil(ctx, id, Stdout, "out one\nagain two\n"); string(got) != "out one\nagain two\n" {
			t.Fatalf("stdout of %s: %q", id[:8], got)
		}
	}
	settle("after every exit", func(g int) bool { return g <= base+2 })
}

// drainEvents polls alice's events from cursor until done says so.
func drainEvents(t *testing.T, e *env, ctx context.Context, cursor uint64, done func(Event) bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		b, err := e.r.PollEvents(ctx, cursor, 256, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cursor = b.Next
		for _, ev := range b.Events {
			if done(ev) {
				return cursor
			}
		}
	}
	t.Fatal("the events never came")
	return cursor
}

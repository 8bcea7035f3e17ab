package keeper

import (
	"errors"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestGroupCommitShares: callers arriving while a flush runs share the
// next one (two flushes for 1+N callers), and none returns before a flush
// that began after its call completed.
func TestGroupCommitShares(t *testing.T) {
	const n = 32
	g := mustGroupCommit(t, t.TempDir())
	var began, completed atomic.Int64
	release := make(chan struct{})
	g.flush = func() error {
		if began.Add(1) == 1 {
			<-release // the first flush runs until every other caller waits
		}
		completed.Add(1)
		return nil
	}
	check := func() error {
		b0 := began.Load()
		if err := g.sync(); err != nil {
			return err
		}
		if c := completed.Load(); c < b0+1 {
			return errors.New("sync returned before a flush begun after it completed")
		}
		return nil
	}
	errs := make(chan error, n+1)
	var wg sync.WaitGroup
	wg.Go(func() { errs <- check() })
	pollUntil(t, func() bool { return began.Load() == 1 })
	for range n {
		wg.Go(func() { errs <- check() })
	}
	pollUntil(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting == n })
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if b := began.Load(); b != 2 {
		t.Fatalf("%d flushes for %d callers, want 2 (one running, one shared)", b, n+1)
	}
}

// TestGroupCommitError: a failed flush reaches its callers; the next
// caller gets a fresh flush. A real syncfs of a real directory succeeds;
// a missing directory is refused when the keeper starts, by its name.
func TestGroupCommitError(t *testing.T) {
	g := mustGroupCommit(t, t.TempDir())
	if err := g.sync(); err != nil {
		t.Fatalf("syncfs: %v", err)
	}
	boom := errors.New("boom")
	g.flush = func() error { return boom }
	if err := g.sync(); !errors.Is(err, boom) {
		t.Fatalf("sync = %v, want boom", err)
	}
	g.flush = func() error { return nil }
	if err := g.sync(); err != nil {
		t.Fatalf("sync after a failure = %v", err)
	}
	if _, err := newGroupCommit("/nonexistent-keeper-dir"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("group commit of a missing directory: %v, want ErrNotExist", err)
	}
}

func mustGroupCommit(t *testing.T, dir string) *groupCommit {
	t.Helper()
	g, err := newGroupCommit(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(g.fd) })
	return g
}

// pollUntil polls cond for up to 10 s.
func pollUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

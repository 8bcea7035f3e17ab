package keeper

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// groupCommit makes exit records durable many at a time. Why: a durable
// record was two fsyncs (the file, then its directory), each a journal
// commit and a device flush; when hundreds of processes settle at once (a
// stop of every process) that was a quarter of the keeper's CPU, and on a
// disk whose flush takes half a second every settle waited for two of
// them in turn. Now a settle writes its record without syncing (atomic
// rename, as before) and calls sync, which returns once a syncfs(2) of
// the records' filesystem that *began after the call* has completed: that
// one flush covers the file's data and its directory entry, and every
// record renamed before it began. Settles arriving while a flush runs
// share the next one, so a burst costs two or three flushes, not 2N.
//
// The rule (RFC.md §16): an exit is reported (done closed, the feed
// noted, a wait answered) only after the flush that covers its record.
// A record whose flush failed is synced alone (SyncFile) and, failing
// that too, logged; the exit is then served from memory, as before.
//
// The directory is opened once, for the keeper's life: syncfs reports a
// writeback error to every descriptor opened before it (errseq), but one
// opened later misses an error somebody else has already seen, so a
// descriptor per flush could miss the failed writeback of a record.
type groupCommit struct {
	fd    int          // the records' directory, never closed (Serve runs once a process)
	flush func() error // syncfs of fd; a test's counter in tests

	mu      sync.Mutex
	cond    *sync.Cond
	running bool
	started uint64 // flushes begun
	done    uint64 // the latest flush completed
	err     error  // its result
	waiting int    // callers waiting for a flush (tests observe it)
}

func newGroupCommit(dir string) (*groupCommit, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exit records: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	g := &groupCommit{fd: fd}
	g.flush = func() error { return syncFS(dir, fd) }
	g.cond = sync.NewCond(&g.mu)
	return g, nil
}

// sync returns once a flush that began after this call has completed,
// with that flush's result. One caller at a time runs the flush; the
// others wait for it, then the next.
func (g *groupCommit) sync() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	want := g.started + 1
	for g.done < want {
		if g.running {
			g.waiting++
			g.cond.Wait()
			g.waiting--
			continue
		}
		g.running = true
		g.started++
		n := g.started
		g.mu.Unlock()
		err := g.flush()
		g.mu.Lock()
		g.running, g.done, g.err = false, n, err
		g.cond.Broadcast()
	}
	return g.err
}

// crashBeforeFlush is the test hook of the durability rule: with
// CAPSULE_KEEPER_TEST_CRASH=before-exit-flush the keeper kills itself
// (SIGKILL) when it is about to make an exit record durable, after the
// record's rename and before anybody was told of the exit. Unset, as in
// every real run, it is one bool.
var crashBeforeFlush = os.Getenv("CAPSULE_KEEPER_TEST_CRASH") == "before-exit-flush"

// syncFS flushes the filesystem holding dir (data, metadata, directory
// entries) through fd and waits for it; since Linux 5.8 it reports
// writeback errors.
func syncFS(dir string, fd int) error {
	if crashBeforeFlush {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}

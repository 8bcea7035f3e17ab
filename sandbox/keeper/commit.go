package keeper

import (
	"fmt"
	"sync"

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
type groupCommit struct {
	dir   string                 // a directory on the records' filesystem
	flush func(dir string) error // syncFS; a test's counter in tests

	mu      sync.Mutex
	cond    *sync.Cond
	running bool
	started uint64 // flushes begun
	done    uint64 // the latest flush completed
	err     error  // its result
	waiting int    // callers waiting for a flush (tests observe it)
}

func newGroupCommit(dir string) *groupCommit {
	g := &groupCommit{dir: dir, flush: syncFS}
	g.cond = sync.NewCond(&g.mu)
	return g
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
		err := g.flush(g.dir)
		g.mu.Lock()
		g.running, g.done, g.err = false, n, err
		g.cond.Broadcast()
	}
	return g.err
}

// syncFS flushes the filesystem holding dir (data, metadata, directory
// entries) and waits for it; since Linux 5.8 it reports writeback errors.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}

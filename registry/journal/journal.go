package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
	"github.com/capsule-host/capsule-host/registry/statedir"
)

// FileName is the journal's name in the state directory.
const FileName = "journal.db"

// Options tune Open. The zero value is the daemon's normal start.
type Options struct {
	// Salvage: when the file is corrupt, move it aside and start on a
	// fresh journal holding every record that could still be read
	// (instead of refusing to start).
	Salvage bool
	// Strict: a record that does not decode fails Open (instead of being
	// listed in Report.Dropped and skipped).
	Strict bool
	// LockTimeout bounds the wait for bbolt's own lock on the file
	// (default 1s; the state directory's lock makes a wait unusual).
	LockTimeout time.Duration
	// CheckTimeout bounds the check of an existing file (default 60s).
	CheckTimeout time.Duration
	// Now is the clock of the meta record's times (default time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.CheckTimeout <= 0 {
		o.CheckTimeout = 60 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Report is what Open found, for the daemon to log and act on.
type Report struct {
	Path string
	// Created: there was no journal (a first start, or the file was
	// removed). The daemon should say so: processes of a previous run
	// are not known.
	Created bool
	// CreatedAt is when the journal was first created.
	CreatedAt time.Time
	// PreviousOpen is when the previous run opened the journal.
	PreviousOpen time.Time
	// CleanShutdown is when the previous run closed the journal; zero if
	// it did not (it crashed or was killed), see Downtime.
	CleanShutdown time.Time
	// Processes and Scopes count the records that were read.
	Processes, Scopes int
	// Dropped lists what could not be used: undecodable records (left in
	// the file and skipped, unless Salvaged) and, after a salvage, the
	// records lost to the corruption. len(Dropped) is the count.
	Dropped []*RecordError
	// Salvaged: the file was corrupt and Options.Salvage was set.
	Salvaged bool
	// MovedAside is where the corrupt file went.
	MovedAside string
	// Corruption is what was wrong with it (a *CorruptError).
	Corruption error
}

// Downtime is how long the daemon was down before now: exact after a clean
// shutdown; after a crash, an upper bound (time since the previous run
// started). ok is false when nothing is known (a new journal).
func (r Report) Downtime(now time.Time) (d time.Duration, exact, ok bool) {
	switch {
	case !r.CleanShutdown.IsZero():
		return now.Sub(r.CleanShutdown), true, true
	case !r.PreviousOpen.IsZero():
		return now.Sub(r.PreviousOpen), false, true
	}
	return 0, false, false
}

// Journal is the daemon's durable memory of persistent processes and event
// sequences. Every write is one fsync'd bbolt transaction: when a method
// returns nil, the change survives a crash of the daemon. It is safe for
// concurrent use.
type Journal struct {
	db     *bbolt.DB
	path   string
	now    func() time.Time
	closed atomic.Bool
	// coalescing counts the Coalesce calls not yet ended.
	coalescing atomic.Int32
}

// Open opens (or creates) the journal at path. An existing file is
// checked first, in a child process (see check.go): a file bbolt cannot
// open or whose structure is damaged is a *CorruptError (errors.Is
// ErrCorrupt), never a silent start on an empty journal — unless
// opts.Salvage, which moves it aside and salvages what can be read. A
// journal of a newer format is a *FormatError. The Report says what was
// found, including the records that were dropped.
//
// The caller must hold the state directory's lock (statedir.Lock): the
// check and the open are two steps, and only one daemon may take them.
func Open(path string, opts Options) (*Journal, Report, error) {
	opts = opts.withDefaults()
	rep := Report{Path: path}
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		now := opts.Now()
		if err := create(path, opts, meta{Format: formatVersion, Created: now}, nil); err != nil {
			return nil, rep, err
		}
		rep.Created = true
		return openRW(path, opts, &rep)
	}
	if err != nil {
		return nil, rep, err
	}
	if err := statedir.CheckPrivateFile(path); err != nil {
		return nil, rep, err
	}
	res, err := runCheck(path, opts)
	if err != nil {
		return nil, rep, err
	}
	if res.busy {
		return nil, rep, fmt.Errorf("%w: %s (bbolt's lock was not free within %v)", ErrBusy, path, opts.LockTimeout)
	}
	found, err := classify(path, res, &rep)
	var ce *CorruptError
	switch {
	case errors.As(err, &ce) && opts.Salvage:
		if err := salvage(path, opts, found, ce, &rep); err != nil {
			return nil, rep, err
		}
	case err != nil:
		return nil, rep, err
	case opts.Strict && len(rep.Dropped) > 0:
		return nil, rep, joinDropped(rep.Dropped)
	}
	return openRW(path, opts, &rep)
}

func joinDropped(ds []*RecordError) error {
	errs := make([]error, len(ds))
	for i, d := range ds {
		errs[i] = d
	}
	return errors.Join(errs...)
}

// openBolt opens path read-write with faults and panics contained (the
// file has been checked; this is defence in depth).
func openBolt(path string, opts Options) (*bbolt.DB, error) {
	var db *bbolt.DB
	err := guarded(func() (err error) {
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.LockTimeout})
		return err
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (bbolt's lock was not free within %v)", ErrBusy, path, opts.LockTimeout)
	}
	if err != nil {
		return nil, &CorruptError{Path: path, Err: err}
	}
	return db, nil
}

// openRW opens the checked journal for the run: it fills the report from
// the meta record and marks the journal open (no clean shutdown yet), so
// a crash of this run is visible to the next.
func openRW(path string, opts Options, rep *Report) (*Journal, Report, error) {
	db, err := openBolt(path, opts)
	if err != nil {
		return nil, *rep, err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		m, b, err := loadMeta(tx, path)
		if err != nil {
			return err
		}
		rep.CreatedAt, rep.PreviousOpen, rep.CleanShutdown = m.Created, m.Opened, m.CleanClosed
		m.Opened, m.CleanClosed = opts.Now(), time.Time{}
		return saveMeta(b, m)
	})
	if err != nil {
		db.Close()
		return nil, *rep, err
	}
	return &Journal{db: db, path: path, now: opts.Now}, *rep, nil
}

// create makes a fresh journal at path holding m and whatever seed puts,
// atomically: it is built as path.new, fsync'd by bbolt's commit, then
// renamed into place and the directory fsync'd. A crash midway leaves no
// journal.db (and a .new that the next create removes), never a half-made
// one that would pass for empty.
func create(path string, opts Options, m meta, seed func(*bbolt.Tx) error) error {
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	db, err := bbolt.Open(tmp, 0o600, &bbolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		return fmt.Errorf("journal: creating %s: %w", tmp, err)
	}
	err = os.Chmod(tmp, 0o600) // exactly, whatever the umask
	if err == nil {
		err = db.Update(func(tx *bbolt.Tx) error { return initTx(tx, m, seed) })
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = atomicfile.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: creating %s: %w", path, err)
	}
	return nil
}

func initTx(tx *bbolt.Tx, m meta, seed func(*bbolt.Tx) error) error {
	for _, name := range []string{bucketMeta, bucketProcs, bucketScopes} {
		if _, err := tx.CreateBucket([]byte(name)); err != nil {
			return err
		}
	}
	if err := saveMeta(tx.Bucket([]byte(bucketMeta)), m); err != nil {
		return err
	}
	if seed != nil {
		return seed(tx)
	}
	return nil
}

// Path is the journal file's path.
func (j *Journal) Path() string { return j.path }

// Close records a clean shutdown (so the next start knows the downtime
// exactly) and closes the file. Later calls fail with ErrClosed; Close
// itself is idempotent.
func (j *Journal) Close() error {
	if j.closed.Swap(true) {
		return nil
	}
	err := j.db.Update(func(tx *bbolt.Tx) error {
		m, b, err := loadMeta(tx, j.path)
		if err != nil {
			return err
		}
		m.CleanClosed = j.now()
		return saveMeta(b, m)
	})
	if cerr := j.db.Close(); err == nil {
		err = cerr
	}
	return err
}

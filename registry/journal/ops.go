package journal

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// update runs fn in one read-write transaction, committed with fsync.
func (j *Journal) update(fn func(*bbolt.Tx) error) error {
	if j.closed.Load() {
		return ErrClosed
	}
	var err error
	if j.coalescing.Load() > 0 {
		err = j.db.Batch(fn)
	} else {
		err = j.db.Update(fn)
	}
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// Coalesce makes writes from concurrent goroutines share transactions
// (bbolt's Batch) until the returned end is called: each write is still
// durable when it returns, but one fsync serves many, at the cost of up
// to bbolt's MaxBatchDelay (10 ms) of latency per write. The registry
// coalesces while it stops many processes at once: 500 stopped at
// shutdown were 1,000 writes, each its own fsync, one after the other.
// Every write function here may run twice (a batch whose other member
// failed is retried): each reads what it changes inside its transaction.
func (j *Journal) Coalesce() (end func()) {
	j.coalescing.Add(1)
	var once sync.Once
	return func() { once.Do(func() { j.coalescing.Add(-1) }) }
}

func (j *Journal) view(fn func(*bbolt.Tx) error) error {
	if j.closed.Load() {
		return ErrClosed
	}
	err := j.db.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// PutProcess writes (inserts or replaces) p's record, durably: the
// registry journals a spawn before it hands the ID to the guest, so an ID
// a guest holds always names a journaled process. An invalid record is
// refused (ErrInvalid) and nothing is written.
func (j *Journal) PutProcess(p Process) error {
	v, err := EncodeProcess(p)
	if err != nil {
		return recordErr(bucketProcs, p.Key[:], err)
	}
	return j.update(func(tx *bbolt.Tx) error { return store(tx, j.path, bucketProcs, p.Key[:], v) })
}

// GetProcess reads one record: ErrNotFound, or a record error, or it.
func (j *Journal) GetProcess(k Key) (Process, error) {
	var p Process
	err := j.view(func(tx *bbolt.Tx) error {
		var err error
		p, err = getProc(tx, k)
		return err
	})
	return p, err
}

func getProc(tx *bbolt.Tx, k Key) (Process, error) {
	v := tx.Bucket([]byte(bucketProcs)).Get(k[:])
	if v == nil {
		return Process{}, recordErr(bucketProcs, k[:], ErrNotFound)
	}
	p, err := DecodeProcess(k[:], v)
	if err != nil {
		return Process{}, recordErr(bucketProcs, k[:], err)
	}
	return p, nil
}

// UpdateProcess changes one record in one durable transaction: fn gets the
// current record and edits it; an error from fn aborts the change and is
// returned as is. The key cannot change.
func (j *Journal) UpdateProcess(k Key, fn func(*Process) error) error {
	return j.update(func(tx *bbolt.Tx) error {
		p, err := getProc(tx, k)
		if err != nil {
			return err
		}
		if err := fn(&p); err != nil {
			return err
		}
		p.Key = k
		v, err := EncodeProcess(p)
		if err != nil {
			return recordErr(bucketProcs, k[:], err)
		}
		return store(tx, j.path, bucketProcs, k[:], v)
	})
}

// UpdateExit records how and why the process ended and starts its exit
// retention: the retention deadline becomes e.At + its ExitRetention.
func (j *Journal) UpdateExit(k Key, e Exit, r Reason) error {
	return j.UpdateProcess(k, func(p *Process) error {
		p.Exit, p.Reason = &e, r
		p.RetentionDeadline = e.At.Add(p.ExitRetention)
		return nil
	})
}

// UpdateDrain records that stream s was delivered up to offset off.
func (j *Journal) UpdateDrain(k Key, s Stream, off int64) error {
	if s != Stdout && s != Stderr {
		return fmt.Errorf("%w: stream %d is not stdout (0) or stderr (1)", ErrInvalid, s)
	}
	return j.UpdateProcess(k, func(p *Process) error {
		p.Drain[s] = off
		return nil
	})
}

// Touch moves the idle deadline to at + the process's idle timeout. The
// registry decides how often to call it: each call is an fsync.
func (j *Journal) Touch(k Key, at time.Time) error {
	return j.UpdateProcess(k, func(p *Process) error {
		p.IdleDeadline = at.Add(p.IdleTimeout)
		return nil
	})
}

// DeleteProcess forgets a record. Deleting a missing key is not an error.
func (j *Journal) DeleteProcess(k Key) error {
	return j.update(func(tx *bbolt.Tx) error { return store(tx, j.path, bucketProcs, k[:], nil) })
}

// ForEachProcess calls fn for every decodable record, in key order, and
// stops at fn's first error. The records are read in one snapshot and fn
// runs after it ended, so fn may write to the journal (a bbolt write
// inside a read transaction can deadlock on a remap). Undecodable records
// are skipped: Open listed them in its Report, and they stay in the file
// for a build that can read them.
func (j *Journal) ForEachProcess(fn func(Process) error) error {
	var ps []Process
	err := j.view(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte(bucketProcs)).ForEach(func(k, v []byte) error {
			if p, err := DecodeProcess(k, v); err == nil {
				ps = append(ps, p)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := fn(p); err != nil {
			return err
		}
	}
	return nil
}

// ReserveSeq hands out n event sequence numbers of scope o: it returns the
// first, and the scope's next seq moves past the block, durably. A
// registry that reserves blocks (say 1024 at a time) pays one fsync per
// block instead of one per event; after a crash the unused rest of a
// block is skipped, which keeps sequences increasing (never repeated).
func (j *Journal) ReserveSeq(o Owner, n uint64) (uint64, error) {
	if n == 0 {
		return 0, fmt.Errorf("%w: reserving 0 sequence numbers", ErrInvalid)
	}
	var first uint64
	err := j.update(func(tx *bbolt.Tx) error {
		next, err := getSeq(tx, o)
		if err != nil {
			return err
		}
		if next > math.MaxUint64-n {
			return fmt.Errorf("%w: event sequence of %s/%s would overflow", ErrInvalid, o.Capsule, o.Principal)
		}
		first = next
		return j.putSeq(tx, o, next+n)
	})
	return first, err
}

// BumpSeq hands out one sequence number (ReserveSeq(o, 1)).
func (j *Journal) BumpSeq(o Owner) (uint64, error) { return j.ReserveSeq(o, 1) }

// SetSeq sets scope o's next seq. It refuses to lower it (ErrSeqBackwards):
// numbers already handed out would be handed out again.
func (j *Journal) SetSeq(o Owner, next uint64) error {
	return j.update(func(tx *bbolt.Tx) error {
		cur, err := getSeq(tx, o)
		if err != nil {
			return err
		}
		if next < cur {
			return fmt.Errorf("%w: %s/%s: %d < %d", ErrSeqBackwards, o.Capsule, o.Principal, next, cur)
		}
		return j.putSeq(tx, o, next)
	})
}

// NextSeq is scope o's next seq: 1 for a scope never seen.
func (j *Journal) NextSeq(o Owner) (uint64, error) {
	var next uint64
	err := j.view(func(tx *bbolt.Tx) error {
		var err error
		next, err = getSeq(tx, o)
		return err
	})
	return next, err
}

// DeleteScope forgets scope o's sequence (its capsule was removed).
func (j *Journal) DeleteScope(o Owner) error {
	return j.update(func(tx *bbolt.Tx) error { return store(tx, j.path, bucketScopes, scopeKey(o), nil) })
}

// ForEachScope calls fn with every decodable scope and its next seq, after
// the snapshot ended (see ForEachProcess).
func (j *Journal) ForEachScope(fn func(o Owner, next uint64) error) error {
	type sc struct {
		o    Owner
		next uint64
	}
	var all []sc
	err := j.view(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte(bucketScopes)).ForEach(func(k, v []byte) error {
			if o, next, err := decodeScope(k, v); err == nil {
				all = append(all, sc{o, next})
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, s := range all {
		if err := fn(s.o, s.next); err != nil {
			return err
		}
	}
	return nil
}

func getSeq(tx *bbolt.Tx, o Owner) (uint64, error) {
	if err := validOwner(o); err != nil {
		return 0, invalid(ErrInvalid, err)
	}
	k := scopeKey(o)
	v := tx.Bucket([]byte(bucketScopes)).Get(k)
	if v == nil {
		return 1, nil
	}
	_, next, err := decodeScope(k, v)
	if err != nil {
		return 0, recordErr(bucketScopes, k, err)
	}
	return next, nil
}

func (j *Journal) putSeq(tx *bbolt.Tx, o Owner, next uint64) error {
	v, err := encodeScope(o, next)
	if err != nil {
		return recordErr(bucketScopes, scopeKey(o), err)
	}
	return store(tx, j.path, bucketScopes, scopeKey(o), v)
}

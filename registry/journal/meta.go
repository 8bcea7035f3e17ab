package journal

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// metaV1 is the journal's own record.
type metaV1 struct {
	V int `json:"v"`
	// Format is the bucket layout's version (metaVersion is this
	// record's schema).
	Format int `json:"format"`
	// CreatedNS: when the journal was first created.
	CreatedNS int64 `json:"created_ns"`
	// OpenedNS: when the current (or last) run opened it.
	OpenedNS int64 `json:"opened_ns"`
	// CleanShutdownNS: when the last run closed it; 0 while a run has it
	// open, so a crash leaves 0 behind.
	CleanShutdownNS int64 `json:"clean_shutdown_ns"`
	Procs           tally `json:"procs"`
	Scopes          tally `json:"scopes"`
}

// tally is a data bucket's record count and the XOR of its records'
// hashes, kept in the meta record by the same transaction as every write.
// bbolt's consistency check proves the shape of the page tree, not what a
// leaf should hold: a flipped element count in a leaf page makes records
// vanish without any other trace. The tally finds that at the next open.
type tally struct {
	N      uint64 `json:"n"`
	Digest uint64 `json:"digest"`
}

// recordHash is a record's contribution to its bucket's digest.
func recordHash(bucket string, key, val []byte) uint64 {
	h := sha256.New()
	h.Write([]byte(bucket))
	h.Write([]byte{0, byte(len(key))})
	h.Write(key)
	h.Write(val)
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

func (t *tally) add(bucket string, key, val []byte) {
	t.N++
	t.Digest ^= recordHash(bucket, key, val)
}

func (t *tally) remove(bucket string, key, val []byte) {
	t.N--
	t.Digest ^= recordHash(bucket, key, val)
}

// meta is metaV1 in Go types.
type meta struct {
	Format                       int
	Created, Opened, CleanClosed time.Time
	Procs, Scopes                tally
}

// tallyOf is the tally of a data bucket, nil for any other.
func (m *meta) tallyOf(bucket string) *tally {
	switch bucket {
	case bucketProcs:
		return &m.Procs
	case bucketScopes:
		return &m.Scopes
	}
	return nil
}

func encodeMeta(m meta) ([]byte, error) {
	for _, t := range []time.Time{m.Created, m.Opened, m.CleanClosed} {
		if err := validTime("meta time", t); err != nil {
			return nil, invalid(ErrInvalid, err)
		}
	}
	return seal([]byte(keyMeta), metaV1{V: metaVersion, Format: m.Format, CreatedNS: unixNS(m.Created), OpenedNS: unixNS(m.Opened),
		CleanShutdownNS: unixNS(m.CleanClosed), Procs: m.Procs, Scopes: m.Scopes})
}

// decodeMeta decodes the meta record. An unknown meta version or format
// is a *FormatError (a newer build's journal), anything else malformed.
func decodeMeta(path string, val []byte) (meta, error) {
	body, v, err := unseal([]byte(keyMeta), val)
	if err != nil {
		return meta{}, err
	}
	if v != metaVersion {
		return meta{}, &FormatError{Path: path, What: "meta record version", Found: v, Want: metaVersion}
	}
	var w metaV1
	if err := strictJSON(body, &w); err != nil {
		return meta{}, err
	}
	if w.Format != formatVersion {
		return meta{}, &FormatError{Path: path, What: "format", Found: w.Format, Want: formatVersion}
	}
	if w.CreatedNS < 0 || w.OpenedNS < 0 || w.CleanShutdownNS < 0 {
		return meta{}, fmt.Errorf("%w: negative time", ErrMalformed)
	}
	m := meta{Format: w.Format, Created: fromNS(w.CreatedNS), Opened: fromNS(w.OpenedNS), CleanClosed: fromNS(w.CleanShutdownNS), Procs: w.Procs, Scopes: w.Scopes}
	if err := canonical([]byte(keyMeta), val, func() ([]byte, error) { return encodeMeta(m) }); err != nil {
		return meta{}, err
	}
	return m, nil
}

// loadMeta reads the meta record inside a transaction.
func loadMeta(tx *bbolt.Tx, path string) (meta, *bbolt.Bucket, error) {
	b := tx.Bucket([]byte(bucketMeta))
	if b == nil {
		return meta{}, nil, &CorruptError{Path: path, Err: fmt.Errorf("no meta bucket")}
	}
	m, err := decodeMeta(path, b.Get([]byte(keyMeta)))
	if err != nil {
		return meta{}, nil, recordErr(bucketMeta, []byte(keyMeta), err)
	}
	return m, b, nil
}

func saveMeta(b *bbolt.Bucket, m meta) error {
	v, err := encodeMeta(m)
	if err != nil {
		return err
	}
	return b.Put([]byte(keyMeta), v)
}

// store writes (val non-nil) or deletes (val nil) one record of a data
// bucket and updates the bucket's tally, in the caller's transaction.
func store(tx *bbolt.Tx, path, bucket string, key, val []byte) error {
	b := tx.Bucket([]byte(bucket))
	old := b.Get(key)
	if old == nil && val == nil {
		return nil
	}
	m, mb, err := loadMeta(tx, path)
	if err != nil {
		return err
	}
	t := m.tallyOf(bucket)
	if old != nil {
		t.remove(bucket, key, old) // before the write: old is bbolt's memory
	}
	if val == nil {
		err = b.Delete(key)
	} else {
		t.add(bucket, key, val)
		err = b.Put(key, val)
	}
	if err != nil {
		return err
	}
	return saveMeta(mb, m)
}

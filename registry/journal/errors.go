package journal

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// Kinds of failure, for errors.Is.
var (
	// ErrCorrupt: the journal file is damaged at the storage level (bbolt
	// cannot open it, its page structure is inconsistent, or its meta
	// record is missing). Open refuses to start on it; see *CorruptError.
	ErrCorrupt = errors.New("journal is corrupt")
	// ErrFormat: the journal was written by a newer build (its format or
	// meta version is unknown here). Never salvaged: a downgrade must not
	// destroy a newer daemon's state.
	ErrFormat = errors.New("journal format is not supported by this build")
	// ErrBusy: another process has the journal file open (bbolt's own
	// flock); the state directory lock should have prevented it.
	ErrBusy = errors.New("journal is in use by another process")
	// ErrChecker: the checking subprocess could not run (the binary's main
	// does not call reexec.Init, or the executable is gone). Says nothing
	// about the file.
	ErrChecker = errors.New("journal checker did not run")

	// ErrMalformed: a record does not decode (bad JSON, not canonical,
	// an invalid field, a key that does not match it).
	ErrMalformed = errors.New("malformed record")
	// ErrChecksum: a record's checksum does not match its bytes.
	ErrChecksum = errors.New("record checksum mismatch")
	// ErrUnknownVersion: a record of a schema version this build cannot read.
	ErrUnknownVersion = errors.New("unknown record version")
	// ErrUnknownBucket: a bucket this build does not know.
	ErrUnknownBucket = errors.New("unknown bucket")
	// ErrInvalid: a record given to a write is not valid (it could not be
	// read back); nothing was written.
	ErrInvalid = errors.New("invalid record")
	// ErrNotFound: no record under that key.
	ErrNotFound = errors.New("no such record")
	// ErrSeqBackwards: SetSeq would lower a scope's sequence (events
	// already handed out would be numbered again).
	ErrSeqBackwards = errors.New("event sequence would go backwards")
	// ErrClosed: the journal was closed.
	ErrClosed = errors.New("journal is closed")
)

// CorruptError is ErrCorrupt for one file: what bbolt or the check found,
// and the fix.
type CorruptError struct {
	Path string
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal %s is corrupt: %v; move it aside to start empty, or restore a backup (or start with salvage, which moves it aside and keeps every record it can read)", e.Path, e.Err)
}

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func (e *CorruptError) Unwrap() error { return e.Err }

// FormatError is ErrFormat with the versions involved.
type FormatError struct {
	Path  string
	What  string // "format" or "meta record version"
	Found int
	Want  int
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("journal %s: %s %d is newer than this build reads (%d): run the capsule-host that wrote it, or move the journal aside to start empty", e.Path, e.What, e.Found, e.Want)
}

func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// RecordError is a record-level failure: which bucket, which key (the hex
// of its first 6 bytes: short logs; the journal's process keys are hashes,
// never IDs) and what is wrong (Err wraps one of the record Err* kinds).
type RecordError struct {
	Bucket string
	Key    string
	Err    error
}

func (e *RecordError) Error() string {
	if e.Bucket == "" {
		return e.Err.Error() // a file-level problem (see damage)
	}
	if e.Key == "" {
		return fmt.Sprintf("journal bucket %q: %v", e.Bucket, e.Err)
	}
	return fmt.Sprintf("journal bucket %q key %s: %v", e.Bucket, e.Key, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// shortKey is the logged form of any bucket key.
func shortKey(k []byte) string {
	if len(k) > 6 {
		k = k[:6]
	}
	return hex.EncodeToString(k)
}

func recordErr(bucket string, key []byte, err error) *RecordError {
	return &RecordError{Bucket: bucket, Key: shortKey(key), Err: err}
}

package sandbox

import "context"

// STUB: the sandbox helper replaces this file's bodies; the method set is
// the agreed API.

// Chunk is one read of an OutputLog.
type Chunk struct {
	Data []byte
	// Next is the absolute offset after Data.
	Next int64
	// Dropped counts bytes between the requested offset and the first byte
	// of Data that are no longer retained anywhere (memory or spill).
	Dropped int64
	// EOF: the stream is closed and Next is its end.
	EOF bool
}

// OutputLog is one captured output stream: a ring with absolute offsets
// plus a capped private spill file. Safe for concurrent use.
type OutputLog struct{}

// ReadFrom reads up to max bytes from absolute offset off without draining.
func (l *OutputLog) ReadFrom(off int64, max int) (Chunk, error) { return Chunk{}, ErrUnavailable }

// Drain reads up to max bytes from the log's drain cursor and advances it.
func (l *OutputLog) Drain(max int) (Chunk, error) { return Chunk{}, ErrUnavailable }

// Ack tells a Backpressure log that a reader consumed everything before off.
func (l *OutputLog) Ack(off int64) {}

// End is the total number of bytes written to the stream.
func (l *OutputLog) End() int64 { return 0 }

// Retained is the number of bytes held in memory.
func (l *OutputLog) Retained() int64 { return 0 }

// Dropped is the number of bytes no longer retained anywhere.
func (l *OutputLog) Dropped() int64 { return 0 }

// Closed reports whether the writer side has finished (EOF).
func (l *OutputLog) Closed() bool { return false }

// Changed returns a channel closed at the next write or close.
func (l *OutputLog) Changed() <-chan struct{} { return nil }

// Stdin is a process's open stdin. Writes honour backpressure: they block
// until the process reads or ctx ends. Never silently dropped.
type Stdin struct{}

// Write writes all of p or fails. On failure n is how many leading bytes
// reached the pipe; after a failure the stream is closed.
func (s *Stdin) Write(ctx context.Context, p []byte) (n int, err error) { return 0, ErrClosed }

// Close closes stdin. Idempotent.
func (s *Stdin) Close() error { return nil }

// IsClosed reports whether stdin is closed.
func (s *Stdin) IsClosed() bool { return true }

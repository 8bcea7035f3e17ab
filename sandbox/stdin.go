package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Stdin is a process's open stdin. Writes honour backpressure: they block
// until the process reads or ctx ends. Never silently dropped.
type Stdin struct {
	f *os.File
	// turn serialises writes (and the prelude). A channel, not a mutex:
	// a write queued behind a prelude the process does not read must
	// still end with its ctx, never block its caller unboundedly.
	turn   chan struct{}
	closed atomic.Bool
	once   sync.Once
	errMu  sync.Mutex
	err    error // why it closed, for later writes
}

// NewStdin wraps the parent's end of a pipe (as returned by os.Pipe, so
// it is non-blocking and deadline-capable). If prelude is non-empty it is
// written first, in the background; later writes queue behind it.
func NewStdin(f *os.File, prelude []byte) *Stdin {
	s := &Stdin{f: f, turn: make(chan struct{}, 1)}
	if len(prelude) > 0 {
		s.turn <- struct{}{}
		go func() {
			defer func() { <-s.turn }()
			if _, err := s.writeLocked(context.Background(), prelude); err != nil {
				s.setErr(fmt.Errorf("stdin prelude: %w", err))
			}
		}()
	}
	return s
}

// pastDeadline is a write deadline in the past: it wakes a blocked write.
var pastDeadline = time.Unix(1, 0)

// Write writes all of p or fails. On failure n is how many leading bytes
// reached the pipe; after a failure with n > 0 or a broken pipe the stream
// is closed (the process saw a torn write and cannot be resynchronised).
// A ctx that ends before any byte is written closes nothing.
func (s *Stdin) Write(ctx context.Context, p []byte) (int, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, fmt.Errorf("stdin write: queued behind the prelude or another write: %w", ctx.Err())
	}
	defer func() { <-s.turn }()
	return s.writeLocked(ctx, p)
}

func (s *Stdin) writeLocked(ctx context.Context, p []byte) (int, error) {
	if s.closed.Load() {
		return 0, s.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("stdin write: %w", err)
	}
	if len(p) == 0 {
		return 0, nil
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.f.SetWriteDeadline(pastDeadline)
		close(fired)
	})
	n, err := s.f.Write(p)
	if !stop() {
		<-fired
		s.f.SetWriteDeadline(time.Time{})
	}
	if err == nil {
		return n, nil
	}
	switch {
	case s.closed.Load():
		err = s.closedErr()
	case ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("stdin write: %d of %d bytes written: %w", n, len(p), ctx.Err())
	case errors.Is(err, syscall.EPIPE):
		err = fmt.Errorf("stdin write: process closed its stdin after %d of %d bytes: %w", n, len(p), ErrClosed)
	default:
		err = fmt.Errorf("stdin write: %d of %d bytes written: %w", n, len(p), err)
	}
	if n > 0 || errors.Is(err, ErrClosed) || !errors.Is(err, ctx.Err()) {
		s.setErr(err)
		s.closeFile()
	}
	return n, err
}

func (s *Stdin) setErr(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
}

func (s *Stdin) closedErr() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err != nil {
		return fmt.Errorf("stdin closed (%v): %w", s.err, ErrClosed)
	}
	return fmt.Errorf("stdin: %w", ErrClosed)
}

func (s *Stdin) closeFile() {
	s.once.Do(func() {
		s.closed.Store(true)
		s.f.Close()
	})
}

// Close closes stdin, waking a blocked write (which then fails with
// ErrClosed). Idempotent.
func (s *Stdin) Close() error {
	s.closeFile()
	return nil
}

// IsClosed reports whether stdin is closed.
func (s *Stdin) IsClosed() bool { return s.closed.Load() }

package sandbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

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

// OutputLogConfig configures NewOutputLog.
type OutputLogConfig struct {
	// RingBytes is the in-memory window (> 0).
	RingBytes int
	// SpillBytes caps the spill file's data region (0: no spill file).
	SpillBytes int64
	// Overflow is DropOldest or Backpressure.
	Overflow Overflow
	// SpillPath is the file to create at once (O_EXCL, mode 0600),
	// normally inside a directory made by NewSpillDir. With SpillBytes > 0
	// exactly one of SpillPath and SpillDir is required.
	SpillPath string
	// SpillDir and SpillName create the spill file lazily, at the first
	// write, as SpillDir.Path()/SpillName: a process that prints nothing
	// costs no file system work (on this machine a create+unlink pair costs
	// milliseconds, more than the whole spawn).
	SpillDir  *SpillDir
	SpillName string
}

// SpillDir is a private (0700) per-process directory for spill files,
// created on first use inside an existing parent. Safe for concurrent use.
type SpillDir struct {
	parent string
	mu     sync.Mutex
	path   string
	err    error
}

// NewLazySpillDir checks parent (absolute, an existing directory) now and
// creates the private directory only when a log first needs it.
func NewLazySpillDir(parent string) (*SpillDir, error) {
	if err := checkSpillParent(parent); err != nil {
		return nil, err
	}
	return &SpillDir{parent: parent}, nil
}

// Path creates the directory on first call and returns it.
func (d *SpillDir) Path() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path == "" && d.err == nil {
		d.path, d.err = NewSpillDir(d.parent)
	}
	return d.path, d.err
}

// Created returns the directory if it was created ("" otherwise).
func (d *SpillDir) Created() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.path
}

// Remove removes the directory and its files, if it was created.
func (d *SpillDir) Remove() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path == "" {
		return nil
	}
	if err := os.RemoveAll(d.path); err != nil {
		return fmt.Errorf("remove spill dir: %w", err)
	}
	return nil
}

// Spill file format (version 1), little endian. The file alone, with its
// header, is the source of truth for the stream's last SpillBytes bytes, so
// a later host can reopen a log whose writer it did not start:
//
//	0  [8]byte  magic "CAPSLOG\x00"
//	8  uint32   version (1)
//	12 uint32   flags (bit 0: closed, the writer saw EOF)
//	16 uint64   capacity C of the data region
//	24 uint64   start: lowest absolute offset held in the file
//	32 uint64   end: absolute offset after the last byte written
//	40 [24]byte reserved (zero)
//	64 data: the byte at absolute offset o is at 64 + o mod C, for start <= o < end
//
// The header is rewritten after about every MiB of data and when the
// stream closes; a reader of the file trusts only what the header covers.
// While the stream is open the data region keeps wrapping after the header
// was written, so an open stream's header leaves out the oldest bytes that
// the writes up to the next header may overwrite (see writeHeader).
const (
	spillMagic      = "CAPSLOG\x00"
	spillVersion    = 1
	spillHeaderSize = 64
	spillFlagClosed = 1
)

const ringBlock = 64 << 10

// headerEvery bounds how far the spill header may lag behind the data.
const headerEvery = 1 << 20

// OutputLog is one captured output stream: a ring with absolute offsets
// plus a capped private spill file. Safe for concurrent use: one writer
// (the backend's pump) and any number of readers.
type OutputLog struct {
	mu       sync.Mutex
	ringCap  int64
	blocks   [][]byte // lazily allocated ring blocks of ringBlock bytes
	start    int64    // lowest offset held in the ring
	end      int64
	overflow Overflow

	spill      *os.File
	spillPath  string
	lazyDir    *SpillDir // non-nil until the lazy spill file is created
	lazyName   string
	spillCap   int64
	spillStart int64 // lowest offset held in the spill file
	spillErr   error // sticky: the spill failed; nothing below start is retained
	header     [spillHeaderSize]byte
	headerAt   int64 // end offset the header on disk records
	headerRoom int64 // bytes that may follow headerAt before a new header

	closed  bool
	removed bool
	changed chan struct{}

	drainMu  sync.Mutex
	drainCur int64
	ack      int64
	lifted   bool
	space    chan struct{} // closed when a backpressured writer may continue
}

// NewOutputLog creates a log; with SpillBytes > 0 it creates the spill file.
func NewOutputLog(cfg OutputLogConfig) (*OutputLog, error) {
	if cfg.RingBytes <= 0 {
		return nil, fmt.Errorf("output log: ring bytes %d must be > 0: %w", cfg.RingBytes, ErrInvalidSpec)
	}
	if cfg.SpillBytes < 0 {
		return nil, fmt.Errorf("output log: spill bytes %d must be >= 0: %w", cfg.SpillBytes, ErrInvalidSpec)
	}
	if cfg.Overflow != DropOldest && cfg.Overflow != Backpressure {
		return nil, fmt.Errorf("output log: overflow %d: %w", cfg.Overflow, ErrInvalidSpec)
	}
	l := &OutputLog{ringCap: int64(cfg.RingBytes), overflow: cfg.Overflow, spillCap: cfg.SpillBytes}
	nb := (l.ringCap + ringBlock - 1) / ringBlock
	l.blocks = make([][]byte, nb)
	if cfg.SpillBytes > 0 {
		switch {
		case cfg.SpillPath != "" && cfg.SpillDir == nil:
			l.spillPath = cfg.SpillPath
			if err := l.openSpill(); err != nil {
				return nil, err
			}
		case cfg.SpillPath == "" && cfg.SpillDir != nil && cfg.SpillName != "":
			l.lazyDir, l.lazyName = cfg.SpillDir, cfg.SpillName
		default:
			return nil, fmt.Errorf("output log: spill bytes need either a spill path or a spill dir and name: %w", ErrInvalidSpec)
		}
	}
	return l, nil
}

// openSpill creates the spill file at l.spillPath and writes its header.
func (l *OutputLog) openSpill() error {
	f, err := os.OpenFile(l.spillPath, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("output log: create spill: %w", err)
	}
	l.spill = f
	if err := l.writeHeader(headerEvery); err != nil {
		os.Remove(l.spillPath)
		return err
	}
	return nil
}

// lazySpillLocked creates a lazy spill file before the first byte lands.
// A failure is a spill failure: reported, and the bytes stay in the ring.
func (l *OutputLog) lazySpillLocked() error {
	if l.lazyDir == nil {
		return nil
	}
	d := l.lazyDir
	l.lazyDir = nil
	dir, err := d.Path()
	if err != nil {
		return l.failSpill(err)
	}
	l.spillPath = filepath.Join(dir, l.lazyName)
	if err := l.openSpill(); err != nil {
		return l.failSpill(err)
	}
	return nil
}

// NewSpillDir creates a private (0700) directory for one process's spill
// files inside parent, which must be an existing absolute directory.
func NewSpillDir(parent string) (string, error) {
	if err := checkSpillParent(parent); err != nil {
		return "", err
	}
	d, err := os.MkdirTemp(parent, "proc-")
	if err != nil {
		return "", fmt.Errorf("spill dir: %w", err)
	}
	if err := os.Chmod(d, 0o700); err != nil {
		os.Remove(d)
		return "", fmt.Errorf("spill dir: %w", err)
	}
	return d, nil
}

func checkSpillParent(parent string) error {
	if !filepath.IsAbs(parent) {
		return fmt.Errorf("spill dir %q is not absolute: %w", parent, ErrInvalidSpec)
	}
	if st, err := os.Stat(parent); err != nil || !st.IsDir() {
		if err == nil {
			err = syscall.ENOTDIR
		}
		return fmt.Errorf("spill dir %q: %v: %w", parent, err, ErrInvalidSpec)
	}
	return nil
}

// writeHeader writes the spill header; callers hold mu (or own l). room
// is how many bytes may be written before the next header.
func (l *OutputLog) writeHeader(room int64) error {
	h := l.header[:]
	copy(h, spillMagic)
	binary.LittleEndian.PutUint32(h[8:], spillVersion)
	var flags uint32
	if l.closed {
		flags |= spillFlagClosed
	}
	binary.LittleEndian.PutUint32(h[12:], flags)
	binary.LittleEndian.PutUint64(h[16:], uint64(l.spillCap))
	binary.LittleEndian.PutUint64(h[24:], uint64(l.headerStart(room)))
	binary.LittleEndian.PutUint64(h[32:], uint64(l.end))
	if _, err := l.spill.WriteAt(h, 0); err != nil {
		return l.failSpill(err)
	}
	l.headerAt, l.headerRoom = l.end, room
	return nil
}

// headerStart is the start offset a header may claim when up to room more
// bytes can be written before the next header: those bytes overwrite the
// slots of the oldest room bytes, which a reader of the file alone must
// then not trust. A closed stream gets no more bytes: its start is exact.
func (l *OutputLog) headerStart(room int64) int64 {
	if l.closed {
		return l.spillStart
	}
	return min(l.end, max(l.spillStart, l.end+room-l.spillCap))
}

// failSpill records a disk error: the spill stops, so bytes outside the
// ring are from now on counted as dropped, and the error is reported by
// Err and by every read that hits the loss.
func (l *OutputLog) failSpill(err error) error {
	if l.spillErr == nil {
		l.spillErr = fmt.Errorf("output spill %s: %w", l.spillPath, err)
	}
	if l.spill != nil {
		l.spill.Close()
		l.spill = nil
	}
	return l.spillErr
}

// Write appends p (the backend's pump calls it). It never blocks on
// readers: under Backpressure the pump calls WaitSpace before reading the
// pipe. It returns len(p) and the spill error when the spill just failed;
// the bytes are in the ring regardless.
func (l *OutputLog) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.removed {
		return 0, fmt.Errorf("output log write: %w", ErrClosed)
	}
	err := l.lazySpillLocked()
	// The header is rewritten about once per headerEvery bytes, not per
	// write, and always before a write that would overwrite slots the
	// header on disk still vouches for: it is what a reader of the file
	// alone trusts (after a host restart). CloseWrite always writes it.
	if l.spill != nil && l.end+int64(len(p)) > l.headerAt+l.headerRoom {
		err = l.writeHeader(max(headerEvery, int64(len(p))))
	}
	if l.spill != nil {
		err = l.spillWrite(p)
	}
	// Ring: only the last ringCap bytes of p can matter.
	q, off := p, l.end
	if int64(len(q)) > l.ringCap {
		off += int64(len(q)) - l.ringCap
		q = q[int64(len(q))-l.ringCap:]
	}
	for len(q) > 0 {
		pos := off % l.ringCap
		bi, bo := pos/ringBlock, pos%ringBlock
		if l.blocks[bi] == nil {
			size := min(int64(ringBlock), l.ringCap-bi*ringBlock)
			l.blocks[bi] = make([]byte, size)
		}
		n := copy(l.blocks[bi][bo:], q)
		q, off = q[n:], off+int64(n)
	}
	l.end += int64(len(p))
	if l.end-l.start > l.ringCap {
		l.start = l.end - l.ringCap
	}
	l.notifyLocked()
	return len(p), err
}

func (l *OutputLog) spillWrite(p []byte) error {
	q, off := p, l.end
	if int64(len(q)) > l.spillCap {
		off += int64(len(q)) - l.spillCap
		q = q[int64(len(q))-l.spillCap:]
	}
	for len(q) > 0 {
		pos := off % l.spillCap
		n := min(int64(len(q)), l.spillCap-pos)
		if _, err := l.spill.WriteAt(q[:n], spillHeaderSize+pos); err != nil {
			return l.failSpill(err)
		}
		q, off = q[n:], off+n
	}
	if newEnd := l.end + int64(len(p)); newEnd-l.spillStart > l.spillCap {
		l.spillStart = newEnd - l.spillCap
	}
	return nil
}

func (l *OutputLog) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// CloseWrite marks the end of the stream (EOF). Idempotent. It returns
// the spill error, if any.
func (l *OutputLog) CloseWrite() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.spillErr
	}
	l.closed = true
	if l.spill != nil {
		// No fsync: the file must survive the host process, not the
		// machine, and an fsync per stream costs milliseconds per spawn.
		l.writeHeader(0)
	}
	l.notifyLocked()
	l.liftLocked()
	return l.spillErr
}

// lowLocked is the lowest offset retained anywhere.
func (l *OutputLog) lowLocked() int64 {
	if l.spill != nil && l.spillStart < l.start {
		return l.spillStart
	}
	return l.start
}

// ReadFrom reads up to max bytes from absolute offset off without draining.
// Bytes that slid out of the ring come from the spill file; only bytes
// beyond the spill cap are reported as Dropped (Data then starts at the
// oldest retained byte). If the loss was caused by a spill failure, the
// chunk is returned together with an error wrapping ErrSpill.
// off must be in [0, End()]: an offset beyond the end is ErrBadOffset.
func (l *OutputLog) ReadFrom(off int64, max int) (Chunk, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed {
		return Chunk{}, fmt.Errorf("output log: removed by cleanup: %w", ErrNotFound)
	}
	if off < 0 || off > l.end {
		return Chunk{}, fmt.Errorf("output log: offset %d outside [0, %d]: %w", off, l.end, ErrBadOffset)
	}
	var c Chunk
	if low := l.lowLocked(); off < low {
		c.Dropped = low - off
		off = low
	}
	n := min(int64(max), l.end-off)
	if n < 0 {
		n = 0
	}
	if n > 0 {
		c.Data = make([]byte, n)
		if off >= l.start {
			l.ringRead(c.Data, off)
		} else if err := l.spillRead(c.Data, off); err != nil {
			// The spill just failed: serve what the ring still has.
			c.Data = nil
			c.Dropped += l.start - off
			off = l.start
			n = min(int64(max), l.end-off)
			c.Data = make([]byte, n)
			l.ringRead(c.Data, off)
		}
	}
	c.Next = off + n
	c.EOF = l.closed && c.Next == l.end
	var err error
	if c.Dropped > 0 && l.spillErr != nil {
		err = fmt.Errorf("%d bytes lost: %w: %w", c.Dropped, ErrSpill, l.spillErr)
	}
	return c, err
}

func (l *OutputLog) ringRead(dst []byte, off int64) {
	for len(dst) > 0 {
		pos := off % l.ringCap
		bi, bo := pos/ringBlock, pos%ringBlock
		n := copy(dst, l.blocks[bi][bo:])
		dst, off = dst[n:], off+int64(n)
	}
}

func (l *OutputLog) spillRead(dst []byte, off int64) error {
	for len(dst) > 0 {
		pos := off % l.spillCap
		n := min(int64(len(dst)), l.spillCap-pos)
		if _, err := l.spill.ReadAt(dst[:n], spillHeaderSize+pos); err != nil {
			return l.failSpill(err)
		}
		dst, off = dst[n:], off+n
	}
	return nil
}

// Drain reads up to max bytes from the log's drain cursor and advances it
// (read-logs semantics). Under Backpressure the cursor also acknowledges.
func (l *OutputLog) Drain(max int) (Chunk, error) {
	l.drainMu.Lock()
	defer l.drainMu.Unlock()
	l.mu.Lock()
	cur := l.drainCur
	l.mu.Unlock()
	c, err := l.ReadFrom(cur, max)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrBadOffset) {
		return c, err
	}
	l.mu.Lock()
	if c.Next > l.drainCur {
		l.drainCur = c.Next
		l.spaceLocked()
	}
	l.mu.Unlock()
	return c, err
}

// DrainCursor is the drain cursor's offset.
func (l *OutputLog) DrainCursor() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drainCur
}

// Ack tells a Backpressure log that a reader consumed everything before off.
// The writer may run ahead of max(drain cursor, ack) by RingBytes.
func (l *OutputLog) Ack(off int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off > l.end {
		off = l.end
	}
	if off > l.ack {
		l.ack = off
		l.spaceLocked()
	}
}

func (l *OutputLog) ackPointLocked() int64 { return max(l.ack, l.drainCur) }

func (l *OutputLog) spaceLocked() {
	if l.space != nil && l.end-l.ackPointLocked() < l.ringCap {
		close(l.space)
		l.space = nil
	}
}

// WaitSpace is called by the pump before it reads the pipe. It returns how
// many bytes the pump may read now (> 0), blocking only the calling
// goroutine while a Backpressure log has RingBytes unacknowledged. It
// returns 0 when stop is closed first. DropOldest logs never block.
func (l *OutputLog) WaitSpace(stop <-chan struct{}) int64 {
	for {
		l.mu.Lock()
		if l.overflow != Backpressure || l.lifted || l.closed {
			l.mu.Unlock()
			return l.ringCap
		}
		if room := l.ringCap - (l.end - l.ackPointLocked()); room > 0 {
			l.mu.Unlock()
			return room
		}
		if l.space == nil {
			l.space = make(chan struct{})
		}
		ch := l.space
		l.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			return 0
		}
	}
}

// LiftBackpressure turns a Backpressure log into DropOldest for the rest
// of the stream. Backends call it at the drain deadline, for the final
// sweep of the pipes: until then a reader may still catch up, and after it
// bytes still in the pipe must be captured (ring, then spill, then counted
// as dropped) rather than lost unseen.
func (l *OutputLog) LiftBackpressure() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.liftLocked()
}

func (l *OutputLog) liftLocked() {
	l.lifted = true
	if l.space != nil {
		close(l.space)
		l.space = nil
	}
}

// End is the total number of bytes written to the stream.
func (l *OutputLog) End() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}

// Retained is the number of bytes held in memory.
func (l *OutputLog) Retained() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end - l.start
}

// Dropped is the number of bytes no longer retained anywhere.
func (l *OutputLog) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lowLocked()
}

// Closed reports whether the writer side has finished (EOF).
func (l *OutputLog) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Err is the spill error, if the spill file failed (sticky).
func (l *OutputLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spillErr
}

// SpillPath is the spill file ("" without one).
// A lazy spill file has no path until the first write.
func (l *OutputLog) SpillPath() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spillPath
}

// Changed returns a channel closed at the next write or close. After the
// stream is closed it returns an already-closed channel, so a follower
// never waits on a finished stream.
func (l *OutputLog) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.removed {
		return closedChan
	}
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Remove deletes the spill file and frees the ring; later reads give
// ErrNotFound. Idempotent. Backends call it from Cleanup.
func (l *OutputLog) Remove() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed {
		return nil
	}
	l.removed = true
	l.closed = true
	l.blocks = nil
	l.notifyLocked()
	l.liftLocked()
	var err error
	if l.spill != nil {
		err = l.spill.Close()
		l.spill = nil
	}
	if l.spillPath != "" {
		if rerr := os.Remove(l.spillPath); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		return fmt.Errorf("output log remove: %w", err)
	}
	return nil
}

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

// OpenOutputLog reopens a spill file written by an earlier OutputLog (for
// example by a host that has since restarted), read-only: the stream is
// closed (no writer will append), its bytes are served from the file, and
// everything before the header's start is reported as dropped. The file is
// the source of truth: only what its header covers is trusted. Remove
// deletes it.
func OpenOutputLog(path string) (*OutputLog, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open output log: %w", err)
	}
	var h [spillHeaderSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("open output log %s: header: %w", path, err)
	}
	le := binary.LittleEndian
	ver, capacity, start, end := le.Uint32(h[8:]), int64(le.Uint64(h[16:])), int64(le.Uint64(h[24:])), int64(le.Uint64(h[32:]))
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open output log: %w", err)
	}
	switch {
	case string(h[:8]) != spillMagic:
		err = errors.New("bad magic")
	case ver != spillVersion:
		err = fmt.Errorf("version %d", ver)
	case capacity <= 0 || start < 0 || start > end || end-start > capacity:
		err = fmt.Errorf("inconsistent header (capacity %d, start %d, end %d)", capacity, start, end)
	case st.Size() < spillHeaderSize+min(capacity, end):
		err = fmt.Errorf("file is %d bytes, header covers more", st.Size())
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open output log %s: %w: %w", path, ErrSpill, err)
	}
	return &OutputLog{
		ringCap:    1, // empty ring: every read comes from the file
		blocks:     make([][]byte, 1),
		start:      end,
		end:        end,
		overflow:   DropOldest,
		spill:      f,
		spillPath:  path,
		spillCap:   capacity,
		spillStart: start,
		headerAt:   end,
		closed:     true,
		drainCur:   start,
	}, nil
}

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
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
	// Marks: when Data's bytes were captured (absolute offsets; see Mark).
	// Empty when the log keeps no times (an older keeper's answer).
	Marks []Mark
}

// OutputLogConfig configures NewOutputLog.
type OutputLogConfig struct {
	// RingBytes is the in-memory window (> 0).
	RingBytes int
	// SpillBytes caps the spill file's data region (0: no spill file).
	SpillBytes int64
	// Overflow is DropOldest or Backpressure.
	Overflow Overflow
	// Spill and SpillName place the spill file (required with SpillBytes >
	// 0): it is created at the first write, as Spill.Path()/SpillName, so
	// a process that prints nothing costs no file system work (on this
	// machine a create+unlink pair costs milliseconds, more than the whole
	// spawn).
	Spill     *SpillDir
	SpillName string
	// Rate bounds how fast the stream is captured (the zero value:
	// unbounded). See OutputRate.
	Rate OutputRate
}

const ringBlock = 64 << 10

// OutputLog is one captured output stream: a ring with absolute offsets
// plus a capped private spill file. Safe for concurrent use: one writer
// (the backend's pump) and any number of readers.
type OutputLog struct {
	mu       sync.Mutex
	ringCap  int64
	blocks   [][]byte // ring blocks of ringBlock bytes, each made when first written (nil: nothing written)
	start    int64    // lowest offset held in the ring
	end      int64
	overflow Overflow

	spill      *os.File
	spillPath  string
	lazyDir    *SpillDir // non-nil until the lazy spill file is created
	lazyName   string
	spillCap   int64
	spillStart int64 // lowest offset held in the spill file
	spillErr   error // sticky: the spill failed
	// spillHigh: once a write to the spill failed (spillErr set, a full
	// disk say) it takes no more bytes, but what it holds, [spillStart,
	// spillHigh), is still served; only [spillHigh, start) is lost. A
	// failed read closes it (spill nil).
	spillHigh  int64
	header     [spillHeaderSize]byte
	headerAt   int64 // end offset the header on disk records
	headerRoom int64 // bytes that may follow headerAt before a new header

	closed  bool
	removed bool
	changed chan struct{}
	hook    atomic.Pointer[func()] // OnChange

	drainMu  sync.Mutex
	drainCur int64
	ack      int64
	lifted   bool
	space    chan struct{} // closed when a backpressured writer may continue

	rate rateBucket // the capture rate (OutputRate); zero: unbounded

	marks markIndex // capture times (logtime.go)
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
	if err := cfg.Rate.validate(); err != nil {
		return nil, err
	}
	l := &OutputLog{ringCap: int64(cfg.RingBytes), overflow: cfg.Overflow, spillCap: cfg.SpillBytes}
	l.rate = newRateBucket(cfg.Rate, time.Now())
	if cfg.SpillBytes > 0 {
		if cfg.Spill == nil || cfg.SpillName == "" {
			return nil, fmt.Errorf("output log: spill bytes need a spill dir and a name: %w", ErrInvalidSpec)
		}
		l.lazyDir, l.lazyName = cfg.Spill, cfg.SpillName
	}
	return l, nil
}

// Write appends p (the backend's pump calls it). It never blocks on
// readers: under Backpressure the pump calls WaitSpace before reading the
// pipe. It returns len(p) and the spill error when the spill just failed;
// the bytes are in the ring regardless.
func (l *OutputLog) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	defer l.fireHook() // after the unlock
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
	if l.spill != nil && l.spillErr == nil && l.end+int64(len(p)) > l.headerAt+l.headerRoom {
		err = l.writeHeader(max(headerEvery, int64(len(p))))
	}
	if l.spill != nil && l.spillErr == nil {
		err = l.spillWrite(p)
	}
	// Ring: only the last ringCap bytes of p can matter.
	q, off := p, l.end
	if int64(len(q)) > l.ringCap {
		off += int64(len(q)) - l.ringCap
		q = q[int64(len(q))-l.ringCap:]
	}
	if l.blocks == nil {
		// Made at the first write, not at creation: a keeper holds two
		// logs per live process, most of which never write (issue 11's
		// memory per process).
		l.blocks = make([][]byte, (l.ringCap+ringBlock-1)/ringBlock)
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
	now := time.Now()
	l.marks.add(l.end, now)
	l.end += int64(len(p))
	l.rate.take(int64(len(p)), now)
	if l.end-l.start > l.ringCap {
		l.start = l.end - l.ringCap
	}
	l.marks.trim(l.lowLocked())
	l.notifyLocked()
	return len(p), err
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
	defer l.fireHook() // after the unlock
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.spillErr
	}
	l.closed = true
	if l.spill != nil && l.spillErr == nil {
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
	if l.spillErr != nil && off < l.start && off >= l.spillHigh { // the bytes the full disk did not take
		c.Dropped += l.start - off
		off = l.start
		n = min(int64(max), l.end-off)
	}
	if l.spillErr != nil && off < l.spillHigh {
		n = min(n, l.spillHigh-off)
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
	c.Marks = l.marks.span(off, c.Next)
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
// goroutine while a Backpressure log has RingBytes unacknowledged or the
// capture rate (OutputRate) is spent: the writer then blocks in write(2),
// so nothing is lost. It returns 0 when stop is closed first. A
// DropOldest log without a rate never blocks. WaitSpace is Allowance in a
// loop, for pumps that own a goroutine per stream.
func (l *OutputLog) WaitSpace(stop <-chan struct{}) int64 {
	for {
		n, retry, space := l.Allowance(time.Now())
		if n > 0 {
			return n
		}
		if !waitAllowance(retry, space, stop) {
			return 0
		}
	}
}

// waitAllowance waits for retry to pass or space to close; false when
// stop closed first.
func waitAllowance(retry time.Duration, space <-chan struct{}, stop <-chan struct{}) bool {
	var timer <-chan time.Time
	if retry > 0 {
		t := time.NewTimer(retry)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-space:
	case <-timer:
	case <-stop:
		return false
	}
	return true
}

// Allowance is WaitSpace without blocking, for an event loop that serves
// many streams from one goroutine: the pump may read up to n bytes of the
// pipe now when n > 0. With n == 0 it must not read this stream's pipe
// (take its descriptor out of the loop's interest) until retry has passed
// (the capture rate is spent) or space is closed (a Backpressure log is
// full: a reader acknowledged). After reading it passes the bytes to
// Write, which charges them to the rate.
func (l *OutputLog) Allowance(now time.Time) (n int64, retry time.Duration, space <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	free := l.lifted || l.closed
	room := l.ringCap
	if !free && l.overflow == Backpressure {
		if room = l.ringCap - (l.end - l.ackPointLocked()); room <= 0 {
			if l.space == nil {
				l.space = make(chan struct{})
			}
			return 0, 0, l.space
		}
	}
	if free {
		return room, 0, nil
	}
	tokens, wait := l.rate.allow(now)
	if wait > 0 {
		return 0, wait, nil
	}
	return min(room, tokens), 0, nil
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

// Throttled is how long the capture rate has held the writer back so
// far, and how many times: throttling loses nothing (the writer blocks in
// write(2)), but a reader may want to know why a process is slow.
func (l *OutputLog) Throttled() (d time.Duration, times int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate.throttled, l.rate.throttles
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

// OnChange sets f to be called after every write and at the close, on
// the writer's goroutine and outside the log's lock, so that a follower
// of many logs (the keeper's feed) needs no goroutine per log. f must
// not block; Changed is for those that wait.
func (l *OutputLog) OnChange(f func()) { l.hook.Store(&f) }

func (l *OutputLog) fireHook() {
	if f := l.hook.Load(); f != nil {
		(*f)()
	}
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

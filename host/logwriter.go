package host

import (
	"bytes"
	"log/slog"
	"sync"
	"time"
)

// maxLogLine bounds one guest log record; a longer line is split (marked
// "continued"), never dropped.
const maxLogLine = 8 << 10

// lineLog turns a guest's WASI stdout or stderr into slog records, one
// per line, tagged with the capsule, instance and stream.
type lineLog struct {
	mu     sync.Mutex
	log    *slog.Logger
	stream string
	buf    []byte
	limit  *logLimit // shared by the capsule's instances; nil: unbounded
}

func newLineLog(log *slog.Logger, stream string, limit *logLimit) *lineLog {
	return &lineLog{log: log, stream: stream, limit: limit}
}

// Guest log rate, per capsule: a guest printing in a loop would otherwise
// fill the daemon's log (and its disk) at the speed of a host call.
const (
	guestLogLinesPerSec = 100
	guestLogBurst       = 1000
)

// logLimit is a token bucket of log records shared by every instance of
// one capsule (so a pool of 64 does not get 64 times the rate). A record
// over the rate is dropped and counted, never silently: the count is
// logged with the next record let through or at the end of the call,
// whichever comes first, and Dropped totals it.
type logLimit struct {
	mu              sync.Mutex
	log             *slog.Logger
	rate, burst     float64
	tokens          float64
	at              time.Time
	pending, totalN int64
}

func newLogLimit(log *slog.Logger, perSec, burst int) *logLimit {
	return &logLimit{log: log, rate: float64(perSec), burst: float64(burst), tokens: float64(burst), at: time.Now()}
}

// allow takes a token for one record, or counts the record dropped.
func (b *logLimit) allow() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
	if b.tokens < 1 {
		b.pending++
		b.totalN++
		return false
	}
	b.tokens--
	b.report()
	return true
}

// report logs the drops not yet reported (b.mu held).
func (b *logLimit) report() {
	if b.pending > 0 {
		b.log.Warn("guest log lines dropped: over the capsule's log rate", "dropped", b.pending, "dropped_total", b.totalN, "lines_per_sec", b.rate)
		b.pending = 0
	}
}

// flush reports pending drops (at the end of each call).
func (b *logLimit) flush() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.report()
	b.mu.Unlock()
}

// Dropped is how many records the limit dropped in all.
func (b *logLimit) Dropped() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.totalN
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.buf = append(l.buf, p...)
			for len(l.buf) >= maxLogLine {
				l.emit(l.buf[:maxLogLine], true)
				l.buf = append(l.buf[:0], l.buf[maxLogLine:]...)
			}
			break
		}
		l.buf = append(l.buf, p[:i]...)
		p = p[i+1:]
		for len(l.buf) > maxLogLine {
			l.emit(l.buf[:maxLogLine], true)
			l.buf = append(l.buf[:0], l.buf[maxLogLine:]...)
		}
		l.emit(l.buf, false)
		l.buf = l.buf[:0]
	}
	return n, nil
}

// flush emits a pending partial line (at the end of each call).
func (l *lineLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(l.buf, false)
		l.buf = l.buf[:0]
	}
	l.limit.flush()
}

func (l *lineLog) emit(line []byte, continued bool) {
	if !l.limit.allow() {
		return
	}
	if continued {
		l.log.Info("guest "+l.stream, "line", string(line), "continued", true)
		return
	}
	l.log.Info("guest "+l.stream, "line", string(line))
}

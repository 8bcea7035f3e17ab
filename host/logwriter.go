package host

import (
	"bytes"
	"log/slog"
	"sync"
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
}

func newLineLog(log *slog.Logger, stream string) *lineLog {
	return &lineLog{log: log, stream: stream}
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
}

func (l *lineLog) emit(line []byte, continued bool) {
	if continued {
		l.log.Info("guest "+l.stream, "line", string(line), "continued", true)
		return
	}
	l.log.Info("guest "+l.stream, "line", string(line))
}

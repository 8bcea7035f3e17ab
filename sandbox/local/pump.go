package local

import (
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The output pump: one goroutine per stream copies the pipe into its
// OutputLog, honouring the log's backpressure, until EOF or until the
// drain bound stops it (stopPumps).

// startPumps starts the two pumps; pumpsDone closes when both returned.
// A terminal (errR nil) has one stream: stderr's log is closed at once.
func (p *proc) startPumps(outR, errR *os.File) {
	if errR == nil {
		p.readers, p.pumpsLeft = []*os.File{outR}, 1
		p.stderr.CloseWrite()
		p.pumpOn(outR, p.stdout)
		return
	}
	p.readers = []*os.File{outR, errR}
	p.pumpsLeft = 2
	p.pumpOn(outR, p.stdout)
	p.pumpOn(errR, p.stderr)
}

// pumpOn follows one stream: on the shared loop (Options.Multiplex,
// loop.go), or with a pump goroutine of its own, which is also the
// fallback should the loop refuse it.
func (p *proc) pumpOn(r *os.File, l *sandbox.OutputLog) {
	if p.b.multiplex && loop.add(p, r, l) == nil {
		return
	}
	go p.pump(r, l)
}

// drain waits for the pumps up to the spec's drain bound: a descendant
// holding the pipes does not hold the settlement.
func (p *proc) drain() {
	t := time.NewTimer(p.spec.Drain)
	defer t.Stop()
	select {
	case <-p.pumpsDone:
	case <-t.C:
		p.stopPumpsNow()
	}
}

// stopPumpsNow ends the pumps at the drain bound. What still sits in the
// pipes is captured by one last sweep with backpressure lifted (so an
// unacknowledged tail becomes counted drops, never an unseen loss), then
// the pumps stop.
func (p *proc) stopPumpsNow() {
	p.stdout.LiftBackpressure()
	p.stderr.LiftBackpressure()
	close(p.stopPumps)
	p.mu.Lock()
	for _, r := range p.readers {
		r.SetReadDeadline(pastDeadline)
	}
	p.mu.Unlock()
	if p.b.multiplex {
		loop.stop(p)
	}
	<-p.pumpsDone
}

var pastDeadline = time.Unix(1, 0)

// pump copies one stream until EOF or the drain bound. It holds no
// buffer while the pipe is empty, which is most of a persistent
// process's life: it waits for readability in the poller first, then
// borrows a buffer for one batch (pooledBatch) and gives it back.
func (p *proc) pump(r *os.File, l *sandbox.OutputLog) {
	defer func() {
		l.CloseWrite()
		r.Close()
		p.pumpDone()
	}()
	rc, err := r.SyscallConn()
	if err != nil {
		return
	}
	for {
		room := l.WaitSpace(p.stopPumps)
		if room == 0 {
			break // stopped while full: the final sweep still counts the tail
		}
		if waitReadable(rc) != nil {
			break // the drain bound's deadline
		}
		if pooledBatch(rc, l, room) != nil {
			break
		}
	}
	select {
	case <-p.stopPumps:
		bp := pumpBufs.Get().(*[]byte)
		finalSweep(rc, l, *bp)
		pumpBufs.Put(bp)
	default:
	}
}

// waitReadable parks in the poller until the pipe holds data or its
// writers are gone, honouring the read deadline, without reading. The
// readiness asked is a level (poll(2), zero timeout), so an edge the
// poller already delivered is never waited for again.
func waitReadable(rc syscall.RawConn) error {
	return rc.Read(func(fd uintptr) bool { return readableNow(int(fd)) })
}

// pooledBatch reads one batch (readBatch, at most room bytes) into a
// borrowed buffer and writes it to the log. The log copies what it is
// given, so the buffer goes straight back to the pool.
func pooledBatch(rc syscall.RawConn, l *sandbox.OutputLog, room int64) error {
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	n, err := readBatch(rc, buf[:min(int64(len(buf)), room)])
	if n > 0 {
		l.Write(buf[:n])
	}
	return err
}

// finalSweep reads, without waiting, what the pipe still holds when the
// drain bound stops the pump (bounded: a writer still running is killed
// right after).
func finalSweep(rc syscall.RawConn, l *sandbox.OutputLog, buf []byte) {
	rc.Control(func(fd uintptr) {
		for total := 0; total < 1<<20; {
			k, err := unix.Read(int(fd), buf)
			if err == unix.EINTR {
				continue
			}
			if k <= 0 || err != nil {
				return
			}
			l.Write(buf[:k])
			total += k
		}
	})
}

// readBatch reads whatever the pipe holds, up to len(buf), waiting (in
// the poller, honouring the read deadline) only while it is empty.
// Writers typically write 4 KiB at a time; one log write per batch
// instead of per 4 KiB keeps the spill's syscalls off the per-write path.
func readBatch(rc syscall.RawConn, buf []byte) (int, error) {
	n := 0
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		for n < len(buf) {
			k, err := unix.Read(int(fd), buf[n:])
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				return n > 0 // nothing yet: wait for data
			}
			if err != nil {
				rerr = err
				return true
			}
			if k == 0 {
				rerr = io.EOF
				return true
			}
			n += k
		}
		return true
	})
	if rerr == nil {
		rerr = err
	}
	return n, rerr
}

// growPipe asks for a 256 KiB pipe (default 64 KiB), best effort: a
// writer then blocks less while the pump is busy writing the spill file.
// Pipe pages are allocated as they fill, so quiet processes pay nothing.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 256<<10) })
	}
}

// pumpBufs holds the pump buffers, lent for one batch at a time: a
// process that is quiet holds none, and a busy one reuses a buffer
// instead of allocating and zeroing one. 128 KiB reads keep the per-read
// overhead small in a flood.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// pumpDone closes pumpsDone once both pumps returned.
func (p *proc) pumpDone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.pumpsDone:
		return
	default:
	}
	p.pumpsLeft--
	if p.pumpsLeft == 0 {
		close(p.pumpsDone)
	}
}

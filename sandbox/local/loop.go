package local

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The pump loop (Options.Multiplex): one goroutine and one epoll set read
// the output pipes (and PTY masters) of every multiplexed process of this
// host process, where the plain backend parks a pump goroutine per stream
// (pump.go). A keeper holding hundreds of quiet persistent processes then
// pays a map entry per stream instead of a goroutine stack.
//
// Semantics are the pump's: each stream is read in order into its log,
// at most the log's room at a time (a Backpressure log that is full takes
// its pipe out of the set until a reader makes room, which parks one
// goroutine for that stream only), EOF or a read error ends the stream,
// and the drain bound ends a process's streams with the same final sweep
// (stop). The set is level-triggered, so a stream is read again while its
// pipe holds data and a spurious wake-up costs one EAGAIN.
type pumpLoop struct {
	once sync.Once
	err  error
	epfd int

	// mu guards the table and buf, and is held while streams are served:
	// a stream is never read, swept and closed at the same time.
	mu      sync.Mutex
	next    uint64
	streams map[uint64]*loopStream
	buf     []byte
}

// loopStream is one pipe on the loop.
type loopStream struct {
	id     uint64
	p      *proc
	f      *os.File // owns the descriptor; closed by finish only
	rc     syscall.RawConn
	fd     int
	l      *sandbox.OutputLog
	parked bool // out of the set: its Backpressure log is full
	done   bool
}

var (
	loop       pumpLoop
	closedStop = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
)

func (lp *pumpLoop) start() error {
	lp.once.Do(func() {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			lp.err = fmt.Errorf("pump loop: epoll_create1: %w", err)
			return
		}
		lp.epfd, lp.streams, lp.buf = fd, map[uint64]*loopStream{}, make([]byte, 128<<10)
		go lp.run()
	})
	return lp.err
}

// add puts r on the loop as the writer of l. On an error nothing was
// added and the caller pumps r itself.
func (lp *pumpLoop) add(p *proc, r *os.File, l *sandbox.OutputLog) error {
	if err := lp.start(); err != nil {
		return err
	}
	rc, err := r.SyscallConn()
	if err != nil {
		return err
	}
	s := &loopStream{p: p, f: r, rc: rc, l: l, fd: -1}
	rc.Control(func(fd uintptr) { s.fd = int(fd) })
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.next++
	s.id = lp.next
	if err := lp.arm(s); err != nil {
		return err
	}
	lp.streams[s.id] = s
	p.loopStreams = append(p.loopStreams, s)
	return nil
}

// arm puts s's descriptor in the set; the event carries s.id, never the
// descriptor number, so a stale event cannot reach a stream that reused it.
func (lp *pumpLoop) arm(s *loopStream) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(uint32(s.id)), Pad: int32(uint32(s.id >> 32))}
	return unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_ADD, s.fd, &ev)
}

func eventID(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// run is the loop: wait (on one OS thread, in epoll_wait), then serve
// every ready stream.
func (lp *pumpLoop) run() {
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(lp.epfd, events, -1)
		if err != nil {
			continue // EINTR; nothing else can fail on a valid set
		}
		lp.mu.Lock()
		for i := range n {
			if s := lp.streams[eventID(&events[i])]; s != nil {
				lp.serve(s)
			}
		}
		lp.mu.Unlock()
	}
}

// serve reads what s's pipe holds, up to its log's room and the buffer,
// into the log; at EOF or an error (a PTY master's EIO) the stream ends.
func (lp *pumpLoop) serve(s *loopStream) {
	if s.parked {
		return // parked by an earlier event of the same batch
	}
	room := s.l.WaitSpace(closedStop) // never blocks: 0 means full
	if room == 0 {
		lp.park(s)
		return
	}
	buf := lp.buf[:min(int64(len(lp.buf)), room)]
	n, end := 0, false
	for n < len(buf) {
		k, err := unix.Read(s.fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			break
		}
		if err != nil || k == 0 {
			end = true
			break
		}
		n += k
	}
	if n > 0 {
		s.l.Write(buf[:n])
	}
	if end {
		lp.finish(s)
	}
}

// park takes a stream whose log is full out of the set until a reader
// makes room (or the drain bound stops the process); caller holds mu.
func (lp *pumpLoop) park(s *loopStream) {
	unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_DEL, s.fd, nil)
	s.parked = true
	go func() {
		s.l.WaitSpace(s.p.stopPumps)
		lp.mu.Lock()
		defer lp.mu.Unlock()
		if s.done || !s.parked {
			return
		}
		s.parked = false
		if err := lp.arm(s); err != nil {
			lp.finish(s) // cannot follow it any more: end it, counted by the log
		}
	}()
}

// finish ends a stream: out of the set, the log closed, the pipe closed;
// caller holds mu.
func (lp *pumpLoop) finish(s *loopStream) {
	if s.done {
		return
	}
	s.done = true
	if !s.parked {
		unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_DEL, s.fd, nil)
	}
	delete(lp.streams, s.id)
	s.l.CloseWrite()
	s.f.Close()
	s.p.pumpDone()
}

// stop ends p's streams at the drain bound, after one last sweep of what
// their pipes still hold (the caller lifted backpressure first, so an
// unread tail becomes counted drops, never an unseen loss).
func (lp *pumpLoop) stop(p *proc) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for _, s := range p.loopStreams {
		if !s.done {
			finalSweep(s.rc, s.l, lp.buf)
			lp.finish(s)
		}
	}
}

package keeper

import (
	"context"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// logCallTimeout bounds each RemoteLog call: OutputLog's methods take no
// context, and a wedged keeper must not wedge its reader.
const logCallTimeout = 30 * time.Second

// RemoteLog is a stream of a keeper's process, with the methods and
// semantics of *sandbox.OutputLog that the registry uses (see Log). Every
// method is a round trip; End, Dropped, Closed and Retained report the
// last state the keeper sent if the keeper is unreachable (Err says why).
// Changed never polls: it waits on the client's feed (hub.go), or against
// an older keeper parks one watch there.
type RemoteLog struct {
	c      *Client
	ref    sandbox.Ref
	stream Stream

	mu    sync.Mutex
	state LogState
	final bool          // state is the closed stream's last (noteFinal): End and Closed need no round trip
	watch chan struct{} // the channel Changed hands out while a watch is parked
	err   error
}

// Log returns a stream of ref. Several RemoteLogs of one stream are fine.
func (c *Client) Log(ref sandbox.Ref, s Stream) *RemoteLog {
	return &RemoteLog{c: c, ref: ref, stream: s}
}

func (r *RemoteLog) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), logCallTimeout)
}

func (r *RemoteLog) note(st LogState, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.err = err
		return
	}
	// States only move forward; an answer overtaken by a newer one must
	// not move End back.
	if st.End >= r.state.End {
		r.state = st
	}
}

// noteFinal notes a state the keeper read after it recorded the process's
// exit (the feed's, with the exit): the backend closed the stream before
// the process settled, so End and Closed cannot move any more. A state
// read while the stream still ran may pair an End read before the last
// write with Closed read after it, so only this one is final.
func (r *RemoteLog) noteFinal(st LogState) {
	r.note(st, nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.final = r.state.Closed && r.state.End >= 0 // End -1: a recovered stream not opened yet
}

// ReadFrom reads up to max bytes from off, as OutputLog.ReadFrom: Data
// holds min(max, End-off) bytes unless bytes were dropped. Above MaxRead
// it takes several round trips and stops early at a new gap (the next
// call reports it as Dropped).
func (r *RemoteLog) ReadFrom(off int64, max int) (sandbox.Chunk, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	c, st, err := r.c.Read(ctx, r.ref, r.stream, off, max)
	r.note(st, err)
	for err == nil && !c.EOF && len(c.Data) < max && c.Next < st.End {
		more, st2, err2 := r.c.Read(ctx, r.ref, r.stream, c.Next, max-len(c.Data))
		if err2 != nil || more.Dropped > 0 {
			break
		}
		r.note(st2, nil)
		c.Data, c.Next, c.EOF, st = append(c.Data, more.Data...), more.Next, more.EOF, st2
		c.Marks = append(c.Marks, more.Marks...)
		if len(more.Data) == 0 {
			break
		}
	}
	return c, err
}

// Drain reads from the keeper-side drain cursor and advances it. The
// cursor lives in the keeper, so it survives the daemon. At most MaxRead
// bytes per call: a second round trip could not be undone.
func (r *RemoteLog) Drain(max int) (sandbox.Chunk, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	c, st, err := r.c.readOp(ctx, opDrain, r.ref, r.stream, 0, max)
	r.note(st, err)
	return c, err
}

// Ack acknowledges everything before off (Backpressure logs).
func (r *RemoteLog) Ack(off int64) {
	ctx, cancel := r.ctx()
	defer cancel()
	st, err := r.c.logCall(ctx, opAck, r.ref, r.stream, off)
	r.note(st, err)
}

// Changed returns a channel closed at the next write or close after the
// last state this RemoteLog saw, or when the keeper cannot be reached
// (the next read says why). After the stream closed it is already closed.
func (r *RemoteLog) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Closed {
		return closedChan
	}
	if r.watch != nil {
		return r.watch
	}
	ch := make(chan struct{})
	r.watch = ch
	if r.c.hub.waitLog(r, r.state.End, ch) {
		return ch
	}
	w := WatchRequest{Stdout: -1, Stderr: -1}
	if r.stream == Stderr {
		w.Stderr = r.state.End
	} else {
		w.Stdout = r.state.End
	}
	go r.park(ch, w)
	return ch
}

// park waits in the keeper until the stream moves; it ends with the
// connection at the latest.
func (r *RemoteLog) park(ch chan struct{}, w WatchRequest) {
	res, err := r.c.Watch(context.Background(), r.ref, w)
	st := res.Stdout
	if r.stream == Stderr {
		st = res.Stderr
	}
	r.note(st, err)
	r.mu.Lock()
	r.watch = nil
	r.mu.Unlock()
	close(ch)
}

// fire ends the wait on ch, taking the state the feed reported (nil: none,
// the next call asks the keeper).
func (r *RemoteLog) fire(ch chan struct{}, pc *procChange) {
	if pc != nil {
		st := pc.Stdout
		if r.stream == Stderr {
			st = pc.Stderr
		}
		r.note(st, nil)
	}
	r.mu.Lock()
	if r.watch == ch {
		r.watch = nil
	}
	r.mu.Unlock()
	close(ch)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (r *RemoteLog) fetch() LogState {
	ctx, cancel := r.ctx()
	defer cancel()
	st, err := r.c.logCall(ctx, opLogState, r.ref, r.stream, 0)
	r.note(st, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// finalState is the stream's final state, if noteFinal saw it.
func (r *RemoteLog) finalState() (LogState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state, r.final
}

// End is the number of bytes written to the stream.
func (r *RemoteLog) End() int64 {
	if st, ok := r.finalState(); ok {
		return st.End
	}
	return r.fetch().End
}

// Closed reports whether the stream reached EOF.
func (r *RemoteLog) Closed() bool {
	if _, ok := r.finalState(); ok {
		return true
	}
	return r.fetch().Closed
}

// Dropped is the number of bytes no longer retained anywhere.
func (r *RemoteLog) Dropped() int64 { return r.fetch().Dropped }

// Retained is the number of bytes the keeper holds in memory.
func (r *RemoteLog) Retained() int64 { return r.fetch().Retained }

// Err is the last error a call of this RemoteLog met (nil if none).
func (r *RemoteLog) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

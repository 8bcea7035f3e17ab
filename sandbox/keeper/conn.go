package keeper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// conn is one client connection. Each request runs in its own goroutine,
// so a wait or a watch never holds up a read; responses are written whole
// under wmu. Any fault in the framing drops this client only: its
// requests are cancelled, the processes and other clients are untouched.
type conn struct {
	s      *server
	nc     *net.UnixConn
	ctx    context.Context // cancelled when the connection ends
	cancel context.CancelFunc

	wmu      sync.Mutex
	mu       sync.Mutex
	inflight map[uint64]context.CancelFunc
	handlers sync.WaitGroup
}

type handler func(s *server, ctx context.Context, args json.RawMessage) (any, error)

var handlers = map[string]handler{
	opStart:      (*server).opStart,
	opList:       (*server).opList,
	opInspect:    (*server).opInspect,
	opRead:       (*server).opRead,
	opDrain:      (*server).opDrain,
	opAck:        (*server).opAck,
	opLogState:   (*server).opLogState,
	opWatch:      (*server).opWatch,
	opWatchAll:   (*server).opWatchAll,
	opWriteStdin: (*server).opWriteStdin,
	opCloseStdin: (*server).opCloseStdin,
	opSignal:     (*server).opSignal,
	opTerminate:  (*server).opTerminate,
	opWait:       (*server).opWait,
	opStats:      (*server).opStats,
	opCleanup:    (*server).opCleanup,
	opShutdown:   (*server).opShutdown,
	opSnapshot:   (*server).opSnapshot,
}

func (c *conn) serve() {
	defer c.s.dropConn(c)
	defer func() {
		c.cancel()
		c.nc.Close()
		c.handlers.Wait()
	}()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	if err := c.hello(r); err != nil {
		c.s.logf("client dropped: %v", err)
		return
	}
	for {
		body, err := readFrame(c.nc, r, c.s.cfg.FrameTimeout)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.s.logf("client dropped: %v", err)
			}
			return
		}
		var req request
		if err := json.Unmarshal(body, &req); err != nil || req.Op == "" {
			err = fmt.Errorf("frame is not a request: %w: %v", ErrProtocol, err)
			c.reply(req.ID, nil, err)
			c.s.logf("client dropped: %v", err)
			return
		}
		c.dispatch(req)
	}
}

// hello reads the first frame, which must be a hello in a version this
// keeper speaks and arrive within FrameTimeout. A refusal is answered
// with an error frame before the connection closes, so the client can
// say why.
func (c *conn) hello(r io.Reader) error {
	c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.FrameTimeout))
	body, err := readFrame(c.nc, r, c.s.cfg.FrameTimeout)
	c.nc.SetReadDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	var req request
	var a helloArgs
	if json.Unmarshal(body, &req) != nil || req.Op != opHello || json.Unmarshal(req.Args, &a) != nil {
		err := fmt.Errorf("first frame is not a hello: %w", ErrProtocol)
		c.reply(req.ID, nil, err)
		return err
	}
	if a.ProtocolVersion != ProtocolVersion {
		err := fmt.Errorf("client %q speaks protocol version %d, this keeper speaks %d: %w", a.Client, a.ProtocolVersion, ProtocolVersion, ErrProtocolVersion)
		c.reply(req.ID, nil, err)
		return err
	}
	if c.s.isStopping() {
		err := fmt.Errorf("hello: %w", ErrShuttingDown)
		c.reply(req.ID, nil, err)
		return err
	}
	return c.reply(req.ID, helloResult{ProtocolVersion: ProtocolVersion, KeeperPID: os.Getpid(), Backend: c.s.cfg.Name}, nil)
}

func (c *conn) dispatch(req request) {
	if req.Op == opCancel {
		c.cancelRequest(req)
		return
	}
	h, ok := handlers[req.Op]
	if !ok {
		c.reply(req.ID, nil, fmt.Errorf("unknown operation %q: %w", req.Op, ErrProtocol))
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	_, dup := c.inflight[req.ID]
	full := len(c.inflight) >= maxInflight
	if !dup && !full {
		c.inflight[req.ID] = cancel
	}
	c.mu.Unlock()
	switch {
	case dup:
		cancel()
		c.reply(req.ID, nil, fmt.Errorf("request id %d is already in flight: %w", req.ID, ErrProtocol))
		return
	case full:
		cancel()
		c.reply(req.ID, nil, fmt.Errorf("%d requests in flight: %w", maxInflight, ErrBusy))
		return
	}
	c.handlers.Add(1)
	go func() {
		defer c.handlers.Done()
		defer cancel()
		res, err := h(c.s, ctx, req.Args)
		c.finish(req.ID) // before the reply: the client may reuse the id once it has it
		c.reply(req.ID, res, err)
		if req.Op == opShutdown && err == nil {
			c.s.requestQuit()
		}
	}()
}

func (c *conn) finish(id uint64) {
	c.mu.Lock()
	cancel := c.inflight[id]
	delete(c.inflight, id)
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// cancelRequest ends the context of a request in flight (a wait or a
// watch whose caller gave up); it is handled inline, never queued.
func (c *conn) cancelRequest(req request) {
	a, err := decode[cancelArgs](req.Args)
	if err != nil {
		c.reply(req.ID, nil, err)
		return
	}
	c.mu.Lock()
	cancel := c.inflight[a.Target]
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	c.reply(req.ID, struct{}{}, nil)
}

// reply writes one response. A write that fails or times out drops the
// client: it stopped reading, and a half-written frame cannot be undone.
func (c *conn) reply(id uint64, res any, err error) error {
	resp := response{ID: id}
	if err == nil {
		b, merr := json.Marshal(res)
		if merr != nil {
			err = fmt.Errorf("encode result: %w", merr)
		}
		resp.Result = b
	}
	if err != nil {
		resp.Result, resp.Error = nil, toWire(err)
	}
	body, err := json.Marshal(resp)
	if err == nil && len(body) > MaxFrame {
		body, err = json.Marshal(response{ID: id, Error: toWire(fmt.Errorf("response of %d bytes exceeds the frame limit: %w", len(body), ErrProtocol))})
	}
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := writeFrame(c.nc, body, c.s.cfg.WriteTimeout); err != nil {
		c.nc.Close()
		return err
	}
	return nil
}

// decode reads a request's arguments; none at all is the zero value.
func decode[T any](raw json.RawMessage) (T, error) {
	var v T
	if len(raw) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("arguments: %w: %v", ErrProtocol, err)
	}
	return v, nil
}

package keeper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Client timeouts. helloTimeout turns a keeper that accepts but does not
// answer (stopped, wedged) into ErrKeeperGone instead of a hang.
const (
	helloTimeout       = 10 * time.Second
	clientWriteTimeout = 30 * time.Second
	clientFrameTimeout = 30 * time.Second
)

var errTooLarge = errors.New("request exceeds the frame limit")

// Client is one connection to a keeper. Safe for concurrent use: requests
// carry ids and are answered in any order, so a Wait never holds up a
// Read. When the connection ends, every call in flight and every later
// call fails with ErrKeeperGone; Dial again.
type Client struct {
	nc      *net.UnixConn
	backend string
	pid     int

	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan response
	err     error
	done    chan struct{}

	hub hub // the feed's client side; started by the first waiter

	noSnapshot atomic.Bool // the keeper does not know snapshot (snapshot.go)
}

// Dial connects to the keeper of dir. The directory and the socket must
// be ours and writable by nobody else, and the peer must run as us (or
// root): a socket someone else could plant is refused (ErrUnsafePath). No
// socket, or one nobody listens on (a keeper killed with SIGKILL leaves
// it), is ErrKeeperGone at once, never a hang.
func Dial(ctx context.Context, dir string) (*Client, error) {
	return dial(ctx, dir, ProtocolVersion)
}

func dial(ctx context.Context, dir string, version int) (*Client, error) {
	sock := filepath.Join(dir, SocketName)
	for _, p := range []struct {
		path string
		mode fs.FileMode
	}{{dir, fs.ModeDir}, {sock, fs.ModeSocket}} {
		if err := checkOwned(p.path, p.mode); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("keeper %s: %w: %w", p.path, ErrKeeperGone, err)
			}
			return nil, err
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("keeper %s: %w: %w", sock, ErrKeeperGone, err)
	}
	uc := nc.(*net.UnixConn)
	if err := checkPeer(uc); err != nil {
		uc.Close()
		return nil, err
	}
	c := &Client{nc: uc, pending: map[uint64]chan response{}, done: make(chan struct{})}
	c.hub.c = c
	go c.readLoop()
	hctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	var h helloResult
	err = c.call(hctx, opHello, helloArgs{ProtocolVersion: version, Client: fmt.Sprintf("capsule-host[%d]", os.Getpid())}, &h)
	if err != nil {
		c.Close()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("keeper %s: no hello within %v: %w: %w", sock, helloTimeout, ErrKeeperGone, err)
		}
		return nil, err
	}
	c.backend, c.pid = h.Backend, h.KeeperPID
	return c, nil
}

// checkPeer refuses a keeper that runs as another user.
func checkPeer(uc *net.UnixConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return fmt.Errorf("keeper peer credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Geteuid() && cred.Uid != 0 {
		return &UnsafePathError{Path: uc.RemoteAddr().String(), Reason: fmt.Sprintf("keeper runs as uid %d", cred.Uid)}
	}
	return nil
}

// Backend is the backend name in the keeper's refs.
func (c *Client) Backend() string { return c.backend }

// KeeperPID is the keeper's process ID, as it said in its hello.
func (c *Client) KeeperPID() int { return c.pid }

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close ends the connection; calls in flight fail with ErrKeeperGone.
// The keeper and its processes are not affected.
func (c *Client) Close() error {
	c.fail(errors.New("client closed"))
	return nil
}

func (c *Client) readLoop() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		body, err := readFrame(c.nc, r, clientFrameTimeout)
		if err != nil {
			c.fail(err)
			return
		}
		var resp response
		if err := json.Unmarshal(body, &resp); err != nil {
			c.fail(fmt.Errorf("keeper sent a frame that is not a response: %w: %v", ErrProtocol, err))
			return
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp // buffered: never blocks
		}
	}
}

// fail ends the connection once, recording why.
func (c *Client) fail(cause error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("keeper connection: %w: %w", ErrKeeperGone, cause)
		close(c.done)
	}
	c.mu.Unlock()
	c.nc.Close()
}

func (c *Client) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// call sends one request and waits for its answer. When ctx ends first
// the keeper is told to cancel the request, and ctx's error is returned.
// onCall, when a test sets it, sees the op of every request a Client
// sends (which round trips a path makes). Atomic: a feed's goroutine may
// still send while the test that set it ends.
var onCall atomic.Pointer[func(op string)]

func (c *Client) call(ctx context.Context, op string, args, out any) error {
	if f := onCall.Load(); f != nil {
		(*f)(op)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("keeper %s: %w", op, context.Cause(ctx))
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("keeper %s: encode: %w", op, err)
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.send(request{ID: id, Op: op, Args: raw}); err != nil {
		c.forget(id)
		return err
	}
	select {
	case resp := <-ch:
		return decodeResponse(op, resp, out)
	case <-c.done:
		select {
		case resp := <-ch: // answered just before the end
			return decodeResponse(op, resp, out)
		default:
			return c.failure()
		}
	case <-ctx.Done():
		c.forget(id)
		go c.send(request{ID: 0, Op: opCancel, Args: mustJSON(cancelArgs{Target: id})})
		return fmt.Errorf("keeper %s: %w", op, context.Cause(ctx))
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *Client) send(req request) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("keeper %s: encode: %w", req.Op, err)
	}
	if len(body) > MaxFrame {
		return fmt.Errorf("keeper %s: %d bytes: %w: %w", req.Op, len(body), errTooLarge, ErrProtocol)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := writeFrame(c.nc, body, clientWriteTimeout); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			// The keeper closed its end (it shut down). What it sent
			// before, such as the answer to that shutdown, is still to
			// be read: readLoop ends the connection at EOF, after it.
			return fmt.Errorf("keeper %s: %w: %w", req.Op, ErrKeeperGone, err)
		}
		c.fail(err) // a timeout mid-frame: the stream is unusable
		return c.failure()
	}
	return nil
}

func decodeResponse(op string, resp response, out any) error {
	if resp.Error != nil {
		return fromWire(op, resp.Error)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Result, out); err != nil {
		return fmt.Errorf("keeper %s: result: %w: %v", op, ErrProtocol, err)
	}
	return nil
}

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	api "github.com/capsule-host/capsule-host/client"
)

// HTTP hardening: what one client can hold of the daemon. Headers have
// ReadHeaderTimeout (newHTTPServer); bodies are read whole, under
// bodyTimeout, before any handler runs (readBodies); idle keep-alive
// connections close after idleTimeout; and each client may hold at most
// maxConnsPerClient connections (limitConns). Vars so tests can shorten
// them.
var (
	// bodyTimeout bounds receiving one request body: a client that
	// trickles it gets 408 and its connection closed. A per-request read
	// deadline, not http.Server.ReadTimeout: that one would also end the
	// responses that stream (`logs -f`), since net/http cancels a
	// request when its connection's read deadline passes.
	bodyTimeout = 30 * time.Second
	// maxConnsPerClient bounds the connections one client holds open at
	// once: a unix-socket peer by uid, a TCP one by the principal of its
	// token once it has shown one, and by remote address before.
	maxConnsPerClient = 64
)

// maxGraceMS bounds a stop's grace_ms: an hour is already far above any
// host's cap (the registry caps it, 30 s by default); beyond, a value is
// a mistake, and time.Duration would overflow past ~292 years.
const maxGraceMS = int64(time.Hour / time.Millisecond)

// guard is the outermost handler of both listeners. It arms the body
// deadline at once, so every path that leaves a body unread (a refusal
// before readBodies) is bounded too: net/http reads an unread body after
// the handler returns, without any deadline of its own. And it refuses a
// request on a connection over its client's cap.
func guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
		if lc := connFrom(r); lc != nil {
			if over, client := lc.state(); over {
				tooManyConns(w, client)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readBodies reads each request's whole body (at most maxBody bytes)
// under the deadline guard armed, then lifts the deadline, so no handler
// reads from a trickling client and a streaming response is never cut by
// a read deadline.
func readBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
			next.ServeHTTP(w, r)
			return
		}
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			writeErr(w, http.StatusRequestEntityTooLarge, api.CodeInvalidRequest, fmt.Sprintf("request body exceeds %d bytes", maxBody))
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			writeErr(w, http.StatusRequestTimeout, api.CodeInvalidRequest, fmt.Sprintf("request body not received within %v", bodyTimeout))
			return
		case err != nil:
			writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, "reading the request body: "+err.Error())
			return
		}
		_ = rc.SetReadDeadline(time.Time{})
		r.Body = io.NopCloser(bytes.NewReader(b))
		next.ServeHTTP(w, r)
	})
}

// decodeBody decodes a JSON request body into v strictly: at most limit
// bytes, valid UTF-8, no unknown field, and nothing after the one value.
// what names the body in messages ("call body"). It writes the error
// answer itself and reports whether decoding succeeded.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, what string, v any) bool {
	// MaxBytesReader, not a LimitReader: a body cut at the limit must be
	// reported as too large, not as a JSON syntax error.
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		writeErr(w, http.StatusRequestEntityTooLarge, api.CodeInvalidRequest, fmt.Sprintf("%s exceeds %d bytes", what, limit))
		return false
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, what+": "+err.Error())
		return false
	}
	if !utf8.Valid(b) {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, what+" is not valid UTF-8")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, what+": "+err.Error())
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, what+": unexpected data after the JSON value")
		return false
	}
	return true
}

// connLimiter counts the open connections of each client of one
// listener (see maxConnsPerClient).
type connLimiter struct {
	net.Listener
	mu sync.Mutex
	n  map[string]int
}

// limitConns wraps l so that every connection counts against its
// client; a connection over the cap is answered 429 (limitedHandler).
func limitConns(l net.Listener) net.Listener {
	return &connLimiter{Listener: l, n: map[string]int{}}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitedConn{Conn: c, l: l, key: clientKey(c)}
	lc.over = l.add(lc.key)
	return lc, nil
}

// add counts one more connection for key and says if it is over the cap.
func (l *connLimiter) add(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[key]++
	return l.n[key] > maxConnsPerClient
}

func (l *connLimiter) remove(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key]--; l.n[key] <= 0 {
		delete(l.n, key)
	}
}

// clientKey names a connection's client: a unix peer by its uid (the
// kernel's SO_PEERCRED), a TCP peer by its address without the port.
func clientKey(c net.Conn) string {
	if uc, ok := c.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			var cred *unix.Ucred
			var cerr error
			if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err == nil && cerr == nil {
				return fmt.Sprintf("uid %d", cred.Uid)
			}
		}
		return "unix peer"
	}
	if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
		return "address " + host
	}
	return "address " + c.RemoteAddr().String()
}

// limitedConn is one counted connection. A TCP connection moves from its
// address's count to its principal's at its first authenticated request.
type limitedConn struct {
	net.Conn
	l         *connLimiter
	mu        sync.Mutex
	key       string
	over      bool
	bound     bool
	closeOnce sync.Once
}

func (c *limitedConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		key := c.key
		c.mu.Unlock()
		c.l.remove(key)
	})
	return c.Conn.Close()
}

// bindPrincipal counts the connection as the principal's from now on
// (once) and says whether the principal is over the cap.
func (c *limitedConn) bindPrincipal(p string) (over bool, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.bound {
		c.bound = true
		c.l.remove(c.key)
		c.key = "principal " + p
		c.over = c.l.add(c.key)
	}
	return c.over, c.key
}

// state is whether the connection is over the cap, and its client.
func (c *limitedConn) state() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.over, c.key
}

type connKey struct{}

// connContext makes a request's connection reachable from its context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

func connFrom(r *http.Request) *limitedConn {
	lc, _ := r.Context().Value(connKey{}).(*limitedConn)
	return lc
}

// tooManyConns answers a request on a connection over its client's cap:
// 429, and the connection is closed, which frees the slot.
func tooManyConns(w http.ResponseWriter, client string) {
	w.Header().Set("Connection", "close")
	writeErr(w, http.StatusTooManyRequests, api.CodeTooManyConnections,
		fmt.Sprintf("%s already has %d connections open to the daemon (the limit): close or reuse one", client, maxConnsPerClient))
}

package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"time"
)

// ErrUnreachable is the class of "no daemon answered" (no socket, refused,
// wrong path): the CLI exits 3 for it, and says how to start one.
var ErrUnreachable = errors.New("capsule-host daemon unreachable")

// Error is an error answer of the daemon: Status is the HTTP status,
// Code one of the stable Code* values (switch on it, not on Message),
// ToolCode the typed code a tool returned with a CodeToolError (see
// ErrorBody).
type Error struct {
	Status   int
	Code     string
	Message  string
	ToolCode string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Client talks to one daemon.
type Client struct {
	rt    roundTrip
	token string
	where string // for messages
}

// roundTrip sends one request (target is the path and query; hdr holds
// "Key: value" lines; body is nil for none) and returns the status and
// the body. A failure to reach the daemon or to read its answer's head
// is an error; the caller closes the body.
type roundTrip func(ctx context.Context, method, target string, hdr []string, body []byte) (int, io.ReadCloser, error)

// NewUnix returns a client for the daemon on the unix socket path (HTTP
// on a raw socket: unixhttp.go says why not net/http).
func NewUnix(path string) *Client {
	rt := func(ctx context.Context, method, target string, hdr []string, body []byte) (int, io.ReadCloser, error) {
		return unixRoundTrip(ctx, path, method, target, hdr, body)
	}
	return &Client{rt: rt, where: path}
}

// Where names the daemon address for messages.
func (c *Client) Where() string { return c.where }

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	rc, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer rc.Close()
	if out == nil {
		return c.rest(ctx, rc)
	}
	if err := json.NewDecoder(rc).Decode(out); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrUnreachable) {
			// A body without a length that ended mid-value.
			err = c.cutOff(err)
		}
		return fmt.Errorf("decoding the daemon's answer to %s %s: %w", method, path, err)
	}
	return c.rest(ctx, rc)
}

// rest reads what follows the answer up to the body's end: a body cut
// off right after a complete JSON value is ErrUnreachable too, not a
// short answer taken as whole.
func (c *Client) rest(ctx context.Context, rc io.Reader) error {
	if _, err := io.Copy(io.Discard, rc); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return nil
}

// send makes one request and returns the body of a 2xx answer; any other
// status becomes an *Error.
func (c *Client) send(ctx context.Context, method, path string, body any) (io.ReadCloser, error) {
	var b []byte
	var hdr []string
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, err
		}
		hdr = append(hdr, "Content-Type: application/json")
	}
	if c.token != "" {
		hdr = append(hdr, "Authorization: Bearer "+c.token)
	}
	status, rc, err := c.rt(ctx, method, path, hdr, b)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.where, err)
	}
	if status/100 != 2 {
		defer rc.Close()
		var er ErrorResponse
		b, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
		if json.Unmarshal(b, &er) != nil || er.Error.Code == "" {
			return nil, &Error{Status: status, Code: CodeInternal, Message: fmt.Sprintf("HTTP %d: %s", status, bytes.TrimSpace(b))}
		}
		return nil, &Error{Status: status, Code: er.Error.Code, Message: er.Error.Message, ToolCode: er.Error.ToolCode}
	}
	return cutReader{rc: rc, c: c}, nil
}

// cutOff is the error of an answer the daemon stopped sending midway (it
// was killed, or the connection reset): the daemon is gone, so
// ErrUnreachable, with the read error for a person.
func (c *Client) cutOff(err error) error {
	return fmt.Errorf("%w at %s: the answer was cut off: %w", ErrUnreachable, c.where, err)
}

// cutReader is a 2xx answer's body: a read that fails before the body's
// end (io.ErrUnexpectedEOF, a reset) is ErrUnreachable.
type cutReader struct {
	rc io.ReadCloser
	c  *Client
}

func (r cutReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if err != nil && err != io.EOF && !errors.Is(err, ErrUnreachable) && !errors.Is(err, os.ErrClosed) {
		err = r.c.cutOff(err)
	}
	return n, err
}

func (r cutReader) Close() error { return r.rc.Close() }

// Health asks whether the daemon is up.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.do(ctx, "GET", "/v1/health", nil, &h)
}

// waitPoll is how often WaitReady asks.
const waitPoll = 100 * time.Millisecond

// WaitReady polls Health until the daemon is ready (its start compiled
// the capsules and re-adopted the processes), for at most timeout: a
// daemon still loading, or not listening yet, is asked again. Past the
// bound it returns the last answer's error: a CodeLoading *Error saying
// how far the start got, or ErrUnreachable.
func (c *Client) WaitReady(ctx context.Context, timeout time.Duration) (Health, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	var last error // the last answer's reason to wait
	for {
		h, err := c.Health(wctx)
		var e *Error
		switch {
		case err == nil && h.Status != "loading":
			return h, nil
		case err == nil:
			var p LoadProgress
			if h.Loading != nil {
				p = *h.Loading
			}
			last = &Error{Status: 503, Code: CodeLoading, Message: fmt.Sprintf("still loading %d of %d capsules after waiting %v", p.Done, p.Total, timeout)}
		case errors.Is(err, ErrUnreachable) && wctx.Err() == nil:
			last = fmt.Errorf("waited %v: %w", timeout, err)
		case errors.As(err, &e) && e.Code == CodeLoading:
			last = err
		case wctx.Err() == nil || ctx.Err() != nil:
			return h, err // another answer, or the caller gave up
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return h, ctx.Err()
			}
			if last == nil {
				last = fmt.Errorf("waited %v: %w", timeout, ErrUnreachable)
			}
			return h, last
		case <-t.C:
		}
	}
}

// Capsules lists the loaded capsules and their tools.
func (c *Client) Capsules(ctx context.Context) ([]Capsule, error) {
	var l CapsuleList
	err := c.do(ctx, "GET", "/v1/capsules", nil, &l)
	return l.Capsules, err
}

// CapsulesAndFailures lists the loaded capsules and the capsule
// directories that failed to load.
func (c *Client) CapsulesAndFailures(ctx context.Context) ([]Capsule, []CapsuleFailure, error) {
	var l CapsuleList
	err := c.do(ctx, "GET", "/v1/capsules", nil, &l)
	return l.Capsules, l.Failed, err
}

// Capsule returns one capsule.
func (c *Client) Capsule(ctx context.Context, name string) (Capsule, error) {
	var cp Capsule
	return cp, c.do(ctx, "GET", "/v1/capsules/"+url.PathEscape(name), nil, &cp)
}

// Reload re-reads the daemon's capsule directories (name "" : all).
func (c *Client) Reload(ctx context.Context, name string) (ReloadResponse, error) {
	var r ReloadResponse
	return r, c.do(ctx, "POST", "/v1/reload", ReloadRequest{Capsule: name}, &r)
}

// Call makes one tool call.
func (c *Client) Call(ctx context.Context, req CallRequest) (CallResponse, error) {
	var r CallResponse
	return r, c.do(ctx, "POST", "/v1/call", req, &r)
}

// Processes is the operator view, filtered by capsule and principal ("" : any).
func (c *Client) Processes(ctx context.Context, capsule, principal string) ([]Process, error) {
	l, err := c.ProcessList(ctx, capsule, principal)
	return l.Processes, err
}

// ProcessList is Processes with the cluster nodes that did not answer
// (cluster mode: the list spans every live node).
func (c *Client) ProcessList(ctx context.Context, capsule, principal string) (ProcessList, error) {
	q := url.Values{}
	if capsule != "" {
		q.Set("capsule", capsule)
	}
	if principal != "" {
		q.Set("principal", principal)
	}
	p := "/v1/processes"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var l ProcessList
	err := c.do(ctx, "GET", p, nil, &l)
	return l, err
}

// Process returns one process.
func (c *Client) Process(ctx context.Context, id string) (Process, error) {
	var p Process
	return p, c.do(ctx, "GET", "/v1/processes/"+url.PathEscape(id), nil, &p)
}

// LogQuery selects a slice of a process's output.
type LogQuery struct {
	Stream string // "stdout" (default) or "stderr"
	Cursor string // "" : from the oldest retained byte
	Max    int    // 0: the daemon's default
}

func (q LogQuery) values(follow bool) string {
	v := url.Values{}
	if q.Stream != "" {
		v.Set("stream", q.Stream)
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Max > 0 {
		v.Set("max", strconv.Itoa(q.Max))
	}
	if follow {
		v.Set("follow", "1")
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// Logs reads one chunk without draining.
func (c *Client) Logs(ctx context.Context, id string, q LogQuery) (LogChunk, error) {
	var ch LogChunk
	return ch, c.do(ctx, "GET", "/v1/processes/"+url.PathEscape(id)+"/logs"+q.values(false), nil, &ch)
}

// Follow streams chunks to fn until the process's output ends (a chunk
// with EOF), ctx ends, or fn fails.
func (c *Client) Follow(ctx context.Context, id string, q LogQuery, fn func(LogChunk) error) error {
	rc, err := c.send(ctx, "GET", "/v1/processes/"+url.PathEscape(id)+"/logs"+q.values(true), nil)
	if err != nil {
		return err
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	for sc.Scan() {
		var ch LogChunk
		if err := json.Unmarshal(sc.Bytes(), &ch); err != nil {
			var er ErrorResponse
			if json.Unmarshal(sc.Bytes(), &er) == nil && er.Error.Code != "" {
				return &Error{Status: 200, Code: er.Error.Code, Message: er.Error.Message}
			}
			return fmt.Errorf("decoding a log chunk: %w", err)
		}
		if err := fn(ch); err != nil {
			return err
		}
		if ch.EOF {
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("following logs: %w", err)
	}
	return fmt.Errorf("%w: the log stream ended early (daemon shutting down?)", ErrUnreachable)
}

// Stop stops a process gracefully (nil grace: the daemon's default).
func (c *Client) Stop(ctx context.Context, id string, grace *time.Duration) (Exit, error) {
	var req StopRequest
	if grace != nil {
		ms := grace.Milliseconds()
		req.GraceMS = &ms
	}
	var r StopResponse
	err := c.do(ctx, "POST", "/v1/processes/"+url.PathEscape(id)+"/stop", req, &r)
	return r.Exit, err
}

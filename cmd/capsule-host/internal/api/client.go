package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ErrUnreachable is the class of "no daemon answered" (no socket, refused,
// wrong path): the CLI exits 3 for it, and says how to start one.
var ErrUnreachable = errors.New("capsule-host daemon unreachable")

// Error is an error answer of the daemon.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Client talks to one daemon.
type Client struct {
	hc    *http.Client
	base  string
	token string
	where string // for messages
}

// NewUnix returns a client for the daemon on the unix socket path.
func NewUnix(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}
	return &Client{hc: &http.Client{Transport: tr}, base: "http://capsule-host", where: path}
}

// NewTCP returns a client for a loopback TCP listener with a bearer token.
func NewTCP(addr, token string) *Client {
	return &Client{hc: &http.Client{Transport: &http.Transport{DisableCompression: true}}, base: "http://" + addr, token: token, where: addr}
}

// Where names the daemon address for messages.
func (c *Client) Where() string { return c.where }

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding the daemon's answer to %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w at %s: %v", ErrUnreachable, c.where, rootCause(err))
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var er ErrorResponse
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &er) != nil || er.Error.Code == "" {
			return nil, &Error{Status: resp.StatusCode, Code: CodeInternal, Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))}
		}
		return nil, &Error{Status: resp.StatusCode, Code: er.Error.Code, Message: er.Error.Message}
	}
	return resp, nil
}

// Health asks whether the daemon is up.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.do(ctx, "GET", "/v1/health", nil, &h)
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
	return l.Processes, err
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
	resp, err := c.send(ctx, "GET", "/v1/processes/"+url.PathEscape(id)+"/logs"+q.values(true), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
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

// rootCause strips the url.Error and net.OpError wrapping ("Get
// http://...: dial unix ...: connect: no such file or directory") down to
// what a person needs ("connect: no such file or directory").
func rootCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		err = oe.Err
	}
	return err
}

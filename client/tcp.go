//go:build !leanclient

package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// NewTCP returns a client for a loopback TCP listener with a bearer token.
// It uses net/http; the lean client build (-tags leanclient) leaves it
// out and hands --tcp commands to the full binary.
func NewTCP(addr, token string) *Client {
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	c := overHTTP(hc, "http://"+addr, addr)
	c.token = token
	return c
}

// NewUnixKeepAlive returns a client for the daemon on the unix socket path
// that keeps its connections open between requests (net/http's pool), for
// a long-lived caller that makes many: `capsule-host mcp` makes one
// request per tool call, and a fresh connection each time (NewUnix) costs
// a connect and the daemon's accept on every call. At most maxIdleUnix
// connections stay open, each one of the uid's slots on the socket.
func NewUnixKeepAlive(path string) *Client {
	var d net.Dialer
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: maxIdleUnix, IdleConnTimeout: 30 * time.Second,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }}
	return overHTTP(&http.Client{Transport: tr}, "http://capsule-host", path)
}

// maxIdleUnix bounds the idle connections NewUnixKeepAlive keeps.
const maxIdleUnix = 4

// overHTTP is a client whose requests go through hc to base (scheme and
// host); where names the daemon in messages.
func overHTTP(hc *http.Client, base, where string) *Client {
	rt := func(ctx context.Context, method, target string, hdr []string, body []byte) (int, io.ReadCloser, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+target, rd)
		if err != nil {
			return 0, nil, err
		}
		for _, h := range hdr {
			k, v, _ := strings.Cut(h, ": ")
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, rootCause(err)
		}
		return resp.StatusCode, resp.Body, nil
	}
	return &Client{rt: rt, where: where}
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

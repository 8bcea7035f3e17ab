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
)

// NewTCP returns a client for a loopback TCP listener with a bearer token.
// It uses net/http; the lean client build (-tags leanclient) leaves it
// out and hands --tcp commands to the full binary.
func NewTCP(addr, token string) *Client {
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	rt := func(ctx context.Context, method, target string, hdr []string, body []byte) (int, io.ReadCloser, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+target, rd)
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
	return &Client{rt: rt, token: token, where: addr}
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

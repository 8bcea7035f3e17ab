//go:build !leanclient

package client

import (
	"net"
	"net/http"
	"testing"
)

func init() {
	testTransports["tcp"] = func(t *testing.T, h http.Handler) *Client {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return NewTCP(l.Addr().String(), "")
	}
}

//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"testing"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host"
)

// BenchmarkCallEcho compares one warm tool call made in-process
// (host.Call) with the same call through the daemon's HTTP/JSON API on
// the unix socket, side by side in one run: the difference is what the
// socket, HTTP and JSON framing cost per call.
//
//	go test -run '^$' -bench CallEcho -benchtime 2000x ./cmd/capsule-host
func BenchmarkCallEcho(b *testing.B) {
	d := startDaemon(b, nil)
	ctx := host.WithPrincipal(context.Background(), "alice")
	in := `{"message":"hello"}`
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.rt.Host.Call(ctx, "testcap", "echo", in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unix-socket-http", func(b *testing.B) {
		c := api.NewUnix(d.sock)
		req := api.CallRequest{Capsule: "testcap", Tool: "echo", Input: json.RawMessage(in), Principal: "alice"}
		for b.Loop() {
			if _, err := c.Call(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

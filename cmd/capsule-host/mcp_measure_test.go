//go:build !leanclient

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/mcp"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// The figures of issue 14, as benchmarks (nothing here is asserted),
// anchor rows of docs/bench.md (make bench):
//
//	go test -run '^$' -bench 'MCPToolCall|MCPNotifyLatency' -benchtime 200x ./cmd/capsule-host/
//
// mcpBenchDaemon is the daemon both measure: testcap only, the loopback
// listener with alice's token (for the streamable-HTTP endpoint and the
// relay over --tcp).
func mcpBenchDaemon(b *testing.B) *testDaemon {
	b.Helper()
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	return startDaemon(b, func(c *config.Config) {
		c.TCP.Listen = "127.0.0.1:0"
		c.Principals = map[string]config.Principal{"alice": {TokenSHA256: []string{hash(tokAlice)}}}
	})
}

// BenchmarkMCPToolCall: one testcap echo call over the daemon's HTTP API
// (unix socket; the anchor's "theirs"), over MCP stdio (`capsule-host
// mcp`, a subprocess, which hands its stdio to the daemon: "ours"), over
// the daemon's streamable-HTTP MCP endpoint (loopback TCP), and over MCP
// stdio relayed (`capsule-host mcp --tcp`, which serves the session itself
// and makes an API call of each request: what stdio cost before the
// hand-off), interleaved so all see the same load. Reported: each side's
// median and IQR (µs), and the ratios to the API (goal for stdio: <= 1.2).
func BenchmarkMCPToolCall(b *testing.B) {
	d := mcpBenchDaemon(b)
	cl, fresh := api.NewUnixKeepAlive(d.sock), api.NewUnix(d.sock)
	in := json.RawMessage(`{"a":1}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	mcpSide := func(name string, m *mcpStdio) testutil.Side {
		return testutil.Side{Name: name, Run: func() error {
			res, err := m.cs.CallTool(ctx, &sdk.CallToolParams{Name: "testcap__echo", Arguments: in})
			if err == nil && res.IsError {
				err = fmt.Errorf("isError: %+v", res.StructuredContent)
			}
			return err
		}}
	}
	sides := []testutil.Side{
		{Name: "api", Run: func() error {
			_, err := cl.Call(ctx, api.CallRequest{Capsule: "testcap", Tool: "echo", Input: in, Principal: "alice"})
			return err
		}},
		{Name: "api-conn", Run: func() error {
			_, err := fresh.Call(ctx, api.CallRequest{Capsule: "testcap", Tool: "echo", Input: in, Principal: "alice"})
			return err
		}},
		mcpSide("mcp-stdio", d.mcpSession(b, "alice")),
		mcpSide("mcp-http", httpSession(b, d, tokAlice)),
		mcpSide("mcp-stdio-relay", d.mcpSessionTCP(b, tokAlice)),
	}
	b.Run("echo", func(b *testing.B) {
		times := testutil.Interleave(b, sides, 1)
		med := testutil.ReportSides(b, "µs", sides, times)
		b.ReportMetric(0, "ns/op")
		for _, n := range []string{"api-conn", "mcp-stdio", "mcp-http", "mcp-stdio-relay"} {
			b.ReportMetric(med[n]/med["api"], n+"/api")
		}
	})
}

// BenchmarkMCPNotifyLatency: from a process writing a line (its own clock,
// printed) to the subscribed client receiving resources/updated, over
// stdio (handed off: the daemon's own watcher) and over streamable HTTP.
// Goal: median <= 20 ms. Reported: median and IQR ("notify-ms"), p90, max.
func BenchmarkMCPNotifyLatency(b *testing.B) {
	d := mcpBenchDaemon(b)
	for _, c := range []struct {
		name string
		dial func() *mcpStdio
	}{
		{"stdio", func() *mcpStdio { return d.mcpSession(b, "alice") }},
		{"http", func() *mcpStdio { return httpSession(b, d, tokAlice) }},
	} {
		m := c.dial()
		b.Run(c.name, func(b *testing.B) {
			lat := notifyLatency(b, m)
			b.ReportMetric(0, "ns/op")
			testutil.ReportSide(b, "notify", "ms", lat)
			b.ReportMetric(ms(pct(lat, 90)), "p90-ms")
			b.ReportMetric(ms(pct(lat, 100)), "max-ms")
		})
	}
}

// notifyLatency spawns a process that prints its clock (ns) for each stdin
// line, subscribes to its stdout, and returns, per line (b.N of them), the
// time from the print to the client's resources/updated.
func notifyLatency(b *testing.B, m *mcpStdio) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var spawned struct{ OK string }
	m.call(b, "testcap__spawn_persistent", map[string]any{
		"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", `while read l; do date +%s%N; done`}},
		"options": map[string]any{"keep_stdin_open": true},
	}, &spawned)
	defer m.call(b, "stop_process", map[string]any{"id": spawned.OK, "grace_ms": 0}, &map[string]any{})
	uri := mcp.ProcessURI(spawned.OK, "stdout")
	if err := m.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: uri}) }()
	next := uri
	var out []time.Duration
	for b.Loop() {
		m.call(b, "testcap__write_stdin", map[string]any{"id": spawned.OK, "data": "x\n"}, &map[string]any{})
		m.waitUpdate(b, uri)
		got := time.Now()
		rr, err := m.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: next})
		if err != nil {
			b.Fatal(err)
		}
		next, _ = rr.Contents[0].Meta["next_uri"].(string)
		ns, err := strconv.ParseInt(strings.TrimSpace(rr.Contents[0].Text), 10, 64)
		if err != nil {
			b.Fatalf("line %q: %v", rr.Contents[0].Text, err)
		}
		out = append(out, got.Sub(time.Unix(0, ns)))
	}
	return out
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

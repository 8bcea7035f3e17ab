//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/mcp"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// The figures of issue 14, as benchmarks (nothing here is asserted):
//
//	go test -run '^$' -bench 'BenchmarkMCP' -benchtime 200x ./cmd/capsule-host/
//
// BenchmarkMCPToolCall: one testcap echo call over the daemon's HTTP API
// (unix socket), over MCP stdio (`capsule-host mcp`, a subprocess, which
// calls that API) and over the daemon's streamable-HTTP MCP endpoint
// (loopback TCP), interleaved per iteration so all three see the same
// load. Reported: the p50 of each and the ratios to the API (goal for
// stdio: <= 1.2).
func BenchmarkMCPToolCall(b *testing.B) {
	d := tcpDaemon(b)
	st := d.mcpSession(b, "alice")
	sh := httpSession(b, d, tokAlice)
	cl := api.NewUnix(d.sock)
	in := json.RawMessage(`{"a":1}`)
	b.Run("echo", func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var viaAPI, viaStdio, viaHTTP []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if _, err := cl.Call(ctx, api.CallRequest{Capsule: "testcap", Tool: "echo", Input: in, Principal: "alice"}); err != nil {
				b.Fatal(err)
			}
			viaAPI = append(viaAPI, time.Since(t0))
			for _, m := range []struct {
				s   *mcpStdio
				out *[]time.Duration
			}{{st, &viaStdio}, {sh, &viaHTTP}} {
				t0 = time.Now()
				if res, err := m.s.cs.CallTool(ctx, &sdk.CallToolParams{Name: "testcap__echo", Arguments: in}); err != nil || res.IsError {
					b.Fatalf("%v %+v", err, res)
				}
				*m.out = append(*m.out, time.Since(t0))
			}
		}
		pa, ps, ph := pct(viaAPI, 50), pct(viaStdio, 50), pct(viaHTTP, 50)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(us(pa), "api-p50-us")
		b.ReportMetric(us(ps), "mcp-stdio-p50-us")
		b.ReportMetric(us(ph), "mcp-http-p50-us")
		b.ReportMetric(float64(ps)/float64(pa), "stdio/api-p50")
		b.ReportMetric(float64(ph)/float64(pa), "mcp-http/api-p50")
	})
}

// BenchmarkMCPNotifyLatency: from a process writing a line (its own clock,
// printed) to the subscribed client receiving resources/updated, over
// stdio (the daemon's follow stream) and over streamable HTTP (in the
// daemon, woken by the registry's events). Goal: p50 <= 20 ms.
func BenchmarkMCPNotifyLatency(b *testing.B) {
	d := tcpDaemon(b)
	hc := &http.Client{Transport: bearer{tokAlice, http.DefaultTransport}}
	for _, c := range []struct {
		name string
		dial func() *mcpStdio
	}{
		{"stdio", func() *mcpStdio { return d.mcpSession(b, "alice") }},
		{"http", func() *mcpStdio {
			return dialMCP(b, &sdk.StreamableClientTransport{Endpoint: "http://" + d.tcp + "/mcp", HTTPClient: hc}, &testutil.SyncBuffer{})
		}},
	} {
		m := c.dial()
		b.Run(c.name, func(b *testing.B) {
			lat := notifyLatency(b, m)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(ms(pct(lat, 50)), "p50-ms")
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

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

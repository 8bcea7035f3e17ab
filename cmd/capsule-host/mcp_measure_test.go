//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
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

// TestMCPMeasure prints the figures of issue 14 (it asserts no timing):
// a tool call over MCP stdio against the same call over the HTTP API, in
// one run; and the latency from a process writing a line to the
// subscribed client's resources/updated, over stdio and over HTTP.
//
//	CAPSULE_HOST_MCP_MEASURE=1 go test -run TestMCPMeasure -v ./cmd/capsule-host/
func TestMCPMeasure(t *testing.T) {
	if os.Getenv("CAPSULE_HOST_MCP_MEASURE") == "" {
		t.Skip("SKIP: set CAPSULE_HOST_MCP_MEASURE=1 to measure (timings are printed, never asserted)")
	}
	const calls, lines = 200, 50
	d := tcpDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := d.mcpSession(t, "alice")
	cl := api.NewUnix(d.sock)
	in := json.RawMessage(`{"a":1}`)
	var viaAPI, viaMCP []time.Duration
	for i := 0; i < calls; i++ { // interleaved, so both see the same load
		t0 := time.Now()
		if _, err := cl.Call(ctx, api.CallRequest{Capsule: "testcap", Tool: "echo", Input: in, Principal: "alice"}); err != nil {
			t.Fatal(err)
		}
		viaAPI = append(viaAPI, time.Since(t0))
		t0 = time.Now()
		if res, err := st.cs.CallTool(ctx, &sdk.CallToolParams{Name: "testcap__echo", Arguments: in}); err != nil || res.IsError {
			t.Fatalf("%v %+v", err, res)
		}
		viaMCP = append(viaMCP, time.Since(t0))
	}
	pa, pm := pct(viaAPI, 50), pct(viaMCP, 50)
	t.Logf("echo call, %d each, interleaved: HTTP API p50 %v p90 %v; MCP stdio p50 %v p90 %v; ratio p50 %.2f",
		calls, pa, pct(viaAPI, 90), pm, pct(viaMCP, 90), float64(pm)/float64(pa))
	// A call that runs a real process (/bin/true to completion).
	spawn := json.RawMessage(`{"cmd":"/bin/true"}`)
	viaAPI, viaMCP = nil, nil
	for i := 0; i < calls/4; i++ {
		t0 := time.Now()
		if _, err := cl.Call(ctx, api.CallRequest{Capsule: "testcap", Tool: "spawn", Input: spawn, Principal: "alice"}); err != nil {
			t.Fatal(err)
		}
		viaAPI = append(viaAPI, time.Since(t0))
		t0 = time.Now()
		if res, err := st.cs.CallTool(ctx, &sdk.CallToolParams{Name: "testcap__spawn", Arguments: spawn}); err != nil || res.IsError {
			t.Fatalf("%v %+v", err, res)
		}
		viaMCP = append(viaMCP, time.Since(t0))
	}
	pa, pm = pct(viaAPI, 50), pct(viaMCP, 50)
	t.Logf("spawn /bin/true call, %d each, interleaved: HTTP API p50 %v; MCP stdio p50 %v; ratio p50 %.2f",
		calls/4, pa, pm, float64(pm)/float64(pa))

	hc := &http.Client{Transport: bearer{tokAlice, http.DefaultTransport}}
	sh := dialMCP(t, &sdk.StreamableClientTransport{Endpoint: "http://" + d.tcp + "/mcp", HTTPClient: hc}, &testutil.SyncBuffer{})
	for _, c := range []struct {
		name string
		m    *mcpStdio
	}{{"stdio (daemon follow stream)", st}, {"streamable HTTP (in-daemon, registry events)", sh}} {
		lat := notifyLatency(t, ctx, c.m, lines)
		t.Logf("output -> resources/updated over %s, %d lines: p50 %v p90 %v max %v", c.name, lines, pct(lat, 50), pct(lat, 90), pct(lat, 100))
	}
}

// notifyLatency spawns a process that prints its clock (ns) for each stdin
// line, subscribes to its stdout, and returns, per line, the time from
// the print to the client's resources/updated.
func notifyLatency(t *testing.T, ctx context.Context, m *mcpStdio, n int) []time.Duration {
	t.Helper()
	var spawned struct{ OK string }
	m.call(t, "testcap__spawn_persistent", map[string]any{
		"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", `while read l; do date +%s%N; done`}},
		"options": map[string]any{"keep_stdin_open": true},
	}, &spawned)
	uri := mcp.ProcessURI(spawned.OK, "stdout")
	if err := m.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	next := uri
	var out []time.Duration
	for i := 0; i < n; i++ {
		m.call(t, "testcap__write_stdin", map[string]any{"id": spawned.OK, "data": "x\n"}, &map[string]any{})
		m.waitUpdate(t, uri)
		got := time.Now()
		rr, err := m.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: next})
		if err != nil {
			t.Fatal(err)
		}
		next, _ = rr.Contents[0].Meta["next_uri"].(string)
		ns, err := strconv.ParseInt(strings.TrimSpace(rr.Contents[0].Text), 10, 64)
		if err != nil {
			t.Fatalf("line %q: %v", rr.Contents[0].Text, err)
		}
		out = append(out, got.Sub(time.Unix(0, ns)))
	}
	m.call(t, "stop_process", map[string]any{"id": spawned.OK, "grace_ms": 0}, &map[string]any{})
	return out
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i].Round(10 * time.Microsecond)
}

//go:build !leanclient

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// BenchmarkClusterReadE2E is issue 17's cross-node read as a caller sees
// it, through the product's whole path: two built daemons on one real
// etcd, a process held by a, and the shell capsule's read_process_logs
// called over the daemon API on a (same) and on b (cross: b's registry
// forwards it over the authenticated node-to-node channel, a runs it and
// writes its audit line), interleaved per iteration with one bare
// loopback HTTP round trip of the same size (rt). The goal is
// cross ≤ 2×same + rt; cross/goal ≤ 1 when it holds.
// registry/etcddir's BenchmarkClusterRead is the same ratio for the
// registry's read alone, without the API, the guest or the channel's
// authentication.
func BenchmarkClusterReadE2E(b *testing.B) {
	skipSameBinary(b)
	ns, _, mark := startCluster(b, []string{"a", "b"}, "10s")
	na, nb := ns[0], ns[1]
	m, e := toolErr(b, na.c, "alice", "spawn_background_process", map[string]any{"command": "echo hello; exec sleep 600 # " + mark})
	if e != "" {
		b.Fatal(e)
	}
	in, _ := json.Marshal(map[string]any{"id": m["id"], "stream": "stdout"})
	read := func(c *api.Client) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := c.Call(ctx, api.CallRequest{Capsule: "shell", Tool: "read_process_logs", Input: in, Principal: "alice"})
		if err != nil {
			b.Fatal(err)
		}
		return string(res.Output)
	}
	for end := time.Now().Add(30 * time.Second); !strings.Contains(read(na.c), "hello"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			b.Fatal("the process's output never showed on a")
		}
	}
	rt := loopbackTrip(b, len(in))
	var same, cross, trip time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		o1 := read(na.c)
		t1 := time.Now()
		o2 := read(nb.c)
		t2 := time.Now()
		rt()
		t3 := time.Now()
		if !strings.Contains(o1, "hello") || !strings.Contains(o2, "hello") {
			b.Fatalf("reads: %s; %s", o1, o2)
		}
		same, cross, trip = same+t1.Sub(t0), cross+t2.Sub(t1), trip+t3.Sub(t2)
	}
	b.StopTimer()
	n := float64(b.N)
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(us(same), "same-µs")
	b.ReportMetric(us(cross), "cross-µs")
	b.ReportMetric(us(trip), "rt-µs")
	b.ReportMetric(float64(cross)/float64(2*same+trip), "cross/goal")
	stopCluster(b, ns, mark)
}

// loopbackTrip is one bare HTTP round trip over loopback TCP on a kept
// connection: a POST of size bytes, answered with as many.
func loopbackTrip(b *testing.B, size int) func() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Write(body)
	}))
	b.Cleanup(srv.Close)
	cli := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(cli.CloseIdleConnections)
	body := bytes.Repeat([]byte("x"), size)
	return func() {
		resp, err := cli.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

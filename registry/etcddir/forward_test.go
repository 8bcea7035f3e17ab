package etcddir

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry"
)

// loopForwarder carries forwarded calls between test registries over
// real loopback HTTP, in the daemon's wire shape (a call in, a result or
// a RemoteError out; cmd/capsule-host/internal/daemon/cluster_peer.go is
// the production one, with its token and node addresses from etcd).
type loopForwarder struct {
	mu   sync.Mutex
	urls map[string]string
	cli  *http.Client
}

type loopAnswer struct {
	Result json.RawMessage       `json:"result,omitempty"`
	Error  *registry.RemoteError `json:"error,omitempty"`
}

func newLoopForwarder(t testing.TB) *loopForwarder {
	f := &loopForwarder{urls: map[string]string{}, cli: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	t.Cleanup(f.cli.CloseIdleConnections)
	return f
}

// serve answers node's forwarded calls with r until the test ends.
func (f *loopForwarder) serve(t testing.TB, node string, r *registry.Registry) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var call registry.RemoteCall
		if err := json.NewDecoder(req.Body).Decode(&call); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := r.ServeRemote(req.Context(), call)
		a := loopAnswer{Result: res}
		if err != nil {
			e := registry.EncodeRemoteError(err)
			a = loopAnswer{Error: &e}
		}
		json.NewEncoder(w).Encode(a)
	}))
	t.Cleanup(srv.Close)
	f.mu.Lock()
	f.urls[node] = srv.URL
	f.mu.Unlock()
}

func (f *loopForwarder) Forward(ctx context.Context, node string, call registry.RemoteCall) (json.RawMessage, error) {
	f.mu.Lock()
	u, ok := f.urls[node]
	f.mu.Unlock()
	if !ok {
		return nil, &registry.HeldElsewhereError{Node: node}
	}
	body, _ := json.Marshal(call)
	tctx, sent := registry.TraceSent(ctx)
	req, _ := http.NewRequestWithContext(tctx, "POST", u, bytes.NewReader(body))
	resp, err := f.cli.Do(req)
	if err != nil {
		if sent() {
			return nil, &registry.AnswerLostError{Node: node, Cause: err}
		}
		return nil, &registry.HeldElsewhereError{Node: node}
	}
	defer resp.Body.Close()
	var a loopAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return nil, &registry.AnswerLostError{Node: node, Cause: err}
	}
	if a.Error != nil {
		return nil, registry.DecodeRemoteError(*a.Error, node)
	}
	return a.Result, nil
}

// BenchmarkClusterRead measures, interleaved in one run, read-since of a
// process's output through the node that holds it (same), through
// another node (cross: the holder from the cache after the first call,
// then one loopback HTTP round trip to the holder), and a bare loopback
// round trip of the same shape (rt). The goal is cross ≤ 2×same + rt:
// the reported cross/goal ratio is ≤ 1 when it holds.
func BenchmarkClusterRead(b *testing.B) {
	regs, marker := clusterWith(b, 2, false, clusterOpts{forward: true})
	ctx := as("alice")
	req := registry.SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo hello; exec sleep 60"}, Env: []registry.EnvVar{{Key: markerKey, Value: marker}}}
	id, err := regs[0].SpawnPersistent(ctx, req, registry.PersistOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := regs[0].ReadSince(ctx, id, registry.Stdout, nil, 4096)
		if err != nil || time.Now().After(deadline) {
			b.Fatalf("read: %+v %v", c, err)
		}
		if len(c.Data) > 0 {
			break
		}
	}
	rt := newRoundTripper(b)
	var same, cross, trip time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		c1, err1 := regs[0].ReadSince(ctx, id, registry.Stdout, nil, 4096)
		t1 := time.Now()
		c2, err2 := regs[1].ReadSince(ctx, id, registry.Stdout, nil, 4096)
		t2 := time.Now()
		rt()
		t3 := time.Now()
		if err1 != nil || err2 != nil || string(c1.Data) != "hello\n" || string(c2.Data) != "hello\n" {
			b.Fatalf("reads: %q %v; %q %v", c1.Data, err1, c2.Data, err2)
		}
		same, cross, trip = same+t1.Sub(t0), cross+t2.Sub(t1), trip+t3.Sub(t2)
	}
	n := float64(b.N)
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	b.ReportMetric(us(same), "same-µs")
	b.ReportMetric(us(cross), "cross-µs")
	b.ReportMetric(us(trip), "rt-µs")
	b.ReportMetric(float64(cross)/float64(2*same+trip), "cross/goal")
}

// newRoundTripper is "one loopback round trip": a small JSON POST and
// answer, over the same kind of HTTP client, to a server that does
// nothing.
func newRoundTripper(b *testing.B) func() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var call registry.RemoteCall
		json.NewDecoder(req.Body).Decode(&call)
		json.NewEncoder(w).Encode(loopAnswer{Result: json.RawMessage(`{"Data":"aGVsbG8K","Next":"x"}`)})
	}))
	b.Cleanup(srv.Close)
	cli := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.Cleanup(cli.CloseIdleConnections)
	body, _ := json.Marshal(registry.RemoteCall{Op: registry.OpReadSince, ID: "x", Max: 4096})
	return func() {
		resp, err := cli.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var a loopAnswer
		json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
	}
}

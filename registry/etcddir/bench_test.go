package etcddir

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/etcddir/etcdtest"
)

// benchDir joins node to c's cluster for a benchmark, closed at its end.
func benchDir(b *testing.B, c *etcdtest.Cluster, node string) *Dir {
	b.Helper()
	d, err := Open(context.Background(), Config{Endpoints: c.Endpoints(), Node: node, Prefix: "/bench/"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

// BenchmarkReserveRelease is one spawn's directory cost in cluster mode
// (a reservation and its release: two gen-CAS transactions on etcd),
// against BenchmarkLocalReserveRelease, the single-node directory.
func BenchmarkReserveRelease(b *testing.B) {
	d := benchDir(b, etcdtest.Start(b, 1), "bench")
	ctx := context.Background()
	r := registry.DirReservation{Scope: scope, Persistent: true, MaxConcurrent: 8, MaxRetained: 32}
	b.ResetTimer()
	for b.Loop() {
		if err := d.Reserve(ctx, r); err != nil {
			b.Fatal(err)
		}
		if err := d.Release(ctx, scope, 1, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserveReleaseParallel is reserve+release pairs of 16
// distinct scopes at once on one node (each scope's own gen key, so no
// CAS conflicts): the write transactions per second one etcd takes when
// reservations do not serialise on one scope (etcd batches concurrent
// proposals into one fsync), the figure RFC §23's capacity arithmetic
// checks its write budget against.
func BenchmarkReserveReleaseParallel(b *testing.B) {
	d := benchDir(b, etcdtest.Start(b, 1), "bench")
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(8) // × GOMAXPROCS goroutines
	b.ResetTimer()
	t0 := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		s := registry.DirScope{Capsule: "shell", Principal: fmt.Sprintf("p%d", next.Add(1))}
		r := registry.DirReservation{Scope: s, Persistent: true, MaxConcurrent: 8, MaxRetained: 32}
		for pb.Next() {
			if err := d.Reserve(ctx, r); err != nil {
				b.Fatal(err)
			}
			if err := d.Release(ctx, s, 1, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(2*float64(b.N)/time.Since(t0).Seconds(), "txn/s")
}

func BenchmarkLocalReserveRelease(b *testing.B) {
	d := registry.NewLocalDirectory()
	ctx := context.Background()
	r := registry.DirReservation{Scope: scope, Persistent: true, MaxConcurrent: 8, MaxRetained: 32}
	for b.Loop() {
		if err := d.Reserve(ctx, r); err != nil {
			b.Fatal(err)
		}
		d.Release(ctx, scope, 1, 1)
	}
}

// BenchmarkLookup is directory lookups of a process another node holds
// (a record read and its node's liveness), in parallel: lookups/s on one
// node (issue 17's "directory lookups per second"), reported as a metric
// from the wall time of the parallel loop.
func BenchmarkLookup(b *testing.B) {
	c := etcdtest.Start(b, 1)
	ctx := context.Background()
	d, o := benchDir(b, c, "bench"), benchDir(b, c, "other")
	key := [32]byte{7}
	if err := o.Publish(ctx, registry.DirProcess{Key: key, Owner: scope, Node: "other"}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	t0 := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if p, err := d.Lookup(ctx, key); err != nil || p.Node != "other" {
				b.Fatal(p, err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "lookups/s")
}

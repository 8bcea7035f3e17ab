package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// Warm-pool tool call against cold instantiate + call, for the WAT guest
// (no language runtime: instantiation is cheap) and the Go conformance
// capsule (a Go runtime to initialise per instance). The goal is a ratio
// of at least 100× for a real (Go) guest.
//
//	go test -run '^$' -bench 'Call' -benchtime 2s ./host/
func BenchmarkCall(b *testing.B) {
	guests := []struct{ name, dir, tool, input string }{
		{"wat", "", "noop", "{}"},
		{"go", testcapDir, "echo", "{}"},
	}
	for _, g := range guests {
		e := newHost(b, func(c *host.Config) { c.CallTimeout = time.Minute })
		dir := g.dir
		if dir == "" {
			dir = capsuleDir(b, "tools", toolsWasm, "[pool]\nmin_idle = 2\nmax = 4\n")
		}
		c, err := e.h.Load(context.Background(), dir)
		if err != nil {
			b.Fatal(err)
		}
		name := c.Name()
		ctx := host.WithPrincipal(context.Background(), "bench")
		b.Run(g.name+"/warm", func(b *testing.B) {
			for b.Loop() {
				if _, err := e.h.Call(ctx, name, g.tool, g.input); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(g.name+"/cold", func(b *testing.B) {
			for b.Loop() {
				if _, err := c.ColdCall(ctx, g.tool, g.input); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWarmColdRatio measures both paths side by side in every
// iteration (one cold call, then warm calls for as long) and reports the
// ratio, so machine noise hits both alike.
func BenchmarkWarmColdRatio(b *testing.B) {
	e := newHost(b, func(c *host.Config) { c.CallTimeout = time.Minute })
	c, err := e.h.Load(context.Background(), testcapDir)
	if err != nil {
		b.Fatal(err)
	}
	ctx := host.WithPrincipal(context.Background(), "bench")
	var cold, warm time.Duration
	var warmN int
	var sCold, sWarm []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.ColdCall(ctx, "echo", "{}"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		cold += t1.Sub(t0)
		sCold = append(sCold, t1.Sub(t0))
		// Warm calls for as long as this cold call took.
		for n := 0; n == 0 || time.Since(t1) < t1.Sub(t0); n++ {
			t2 := time.Now()
			if _, err := e.h.Call(ctx, "testcap", "echo", "{}"); err != nil {
				b.Fatal(err)
			}
			sWarm = append(sWarm, time.Since(t2))
			warmN++
		}
		warm += time.Since(t1)
	}
	// Median and IQR per side, for docs/bench.md's anchor table.
	testutil.ReportSide(b, "cold", "µs", sCold)
	testutil.ReportSide(b, "warm", "µs", sWarm)
	coldPer := float64(cold.Nanoseconds()) / float64(b.N)
	warmPer := float64(warm.Nanoseconds()) / float64(warmN)
	b.ReportMetric(coldPer, "cold-ns/call")
	b.ReportMetric(warmPer, "warm-ns/call")
	b.ReportMetric(coldPer/warmPer, "cold/warm")
}

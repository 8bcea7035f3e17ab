package host_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
)

// cForms are one C capsule's two forms: the clang core module loaded as
// a core capsule, and the same module wrapped by jco into a component
// (the preview1 adapter adds a second core module, and the shims).
func cForms(b *testing.B) [2]string {
	if enginetest.HostEngine() == "wasmtime" {
		b.Skip("SKIP: the wasmtime engine refuses components (ErrLinkUnsupported, RFC §17)")
	}
	core := componenttest.CompileC(b, filepath.Join(componenttest.Dir(), "..", "ccap", "capsule.c"))
	return [2]string{core, componenttest.Wrap(b, core, "capsule:guest/capsule")}
}

// median of ds in the unit (a time.Duration divisor).
func median(ds []time.Duration, unit time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2]) / float64(unit)
}

func mean(ds []time.Duration, unit time.Duration) float64 {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(sum) / float64(len(ds)) / float64(unit)
}

// BenchmarkCComponentLoad and BenchmarkCComponentCall compare the C
// capsule's core and component forms in the same iterations, so a loaded
// machine's noise hits both alike (medians reported; ns/op is the whole
// iteration). Load: Host.Load of each with a cold compilation cache (a
// fresh directory), then again with that cache warm.
//
// Run: go test -run '^$' -bench CComponentLoad -benchtime 20x ./host/
func BenchmarkCComponentLoad(b *testing.B) {
	forms := cForms(b)
	var cold, cached [2][]time.Duration
	for b.Loop() {
		for i, wasm := range forms {
			b.StopTimer()
			cache, err := os.MkdirTemp(b.TempDir(), "cache")
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			cold[i] = append(cold[i], loadC(b, wasm, cache))
			cached[i] = append(cached[i], loadC(b, wasm, cache))
		}
	}
	b.ReportMetric(median(cold[0], time.Millisecond), "core-cold-ms")
	b.ReportMetric(median(cold[1], time.Millisecond), "component-cold-ms")
	b.ReportMetric(median(cached[0], time.Millisecond), "core-cached-ms")
	b.ReportMetric(median(cached[1], time.Millisecond), "component-cached-ms")
}

// BenchmarkCComponentCall: one warm echo call on each form's pool per
// iteration. Run: go test -run '^$' -bench CComponentCall -benchtime 2000x ./host/
func BenchmarkCComponentCall(b *testing.B) {
	benchCallForms(b, cForms(b), "ccap", ccapManifest)
}

// benchCallForms loads forms[0] (a core module) and forms[1] (the same
// capsule as a component) as capsule name in two hosts and times one
// warm echo call on each per iteration, reporting the medians, their
// ratio and the means.
func benchCallForms(b *testing.B, forms [2]string, name, manifest string) {
	var hosts [2]*env
	for i, wasm := range forms {
		hosts[i] = newHost(b, func(c *host.Config) { c.CallTimeout = time.Minute })
		if _, err := hosts[i].h.Load(context.Background(), capsuleDir(b, name, wasm, manifest)); err != nil {
			b.Fatal(err)
		}
	}
	ctx := host.WithPrincipal(context.Background(), "bench")
	var per [2][]time.Duration
	for b.Loop() {
		for i, e := range hosts {
			t0 := time.Now()
			if _, err := e.h.Call(ctx, name, "echo", `{"n":1}`); err != nil {
				b.Fatal(err)
			}
			per[i] = append(per[i], time.Since(t0))
		}
	}
	// The mean shows the tail the median hides (a loaded machine's
	// preemptions, GC, a pool refill).
	core, comp := median(per[0], time.Microsecond), median(per[1], time.Microsecond)
	b.ReportMetric(core, "core-us/call")
	b.ReportMetric(comp, "component-us/call")
	b.ReportMetric(comp/core, "component/core")
	b.ReportMetric(mean(per[0], time.Microsecond), "core-mean-us")
	b.ReportMetric(mean(per[1], time.Microsecond), "component-mean-us")
}

// loadC is one Host.Load of wasm (a new host, whose setup is not timed)
// with the compilation cache in cache.
func loadC(b *testing.B, wasm, cache string) time.Duration {
	b.StopTimer()
	e := newHost(b, func(c *host.Config) { c.CallTimeout = time.Minute; c.CacheDir = cache })
	dir := capsuleDir(b, "ccap", wasm, ccapManifest)
	b.StartTimer()
	t0 := time.Now()
	if _, err := e.h.Load(context.Background(), dir); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	b.StopTimer()
	_ = e.h.Close(context.Background())
	b.StartTimer()
	return d
}

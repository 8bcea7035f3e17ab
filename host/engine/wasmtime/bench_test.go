//go:build wasmtime

package wasmtime_test

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/host/engine/wasmtime"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// Both engines side by side in one run, so machine noise hits both alike:
//
//	go test -tags wasmtime -run '^$' -bench . -benchtime 2s ./host/engine/wasmtime/
var engines = []struct {
	name string
	ctor enginetest.Ctor
}{
	{wazero.Name, wazero.New},
	{wasmtime.Name, wasmtime.New},
}

const testcapDir = enginetest.TestcapDir

// BenchmarkEngine: the engine seam alone. Go guest = the 4.4 MB
// conformance capsule (Go runtime); WAT guest = the suite fixture.
func BenchmarkEngine(b *testing.B) {
	wasm, stubs := enginetest.GoGuest(b, wazero.New)
	ctx := context.Background()
	for _, e := range engines {
		b.Run(e.name+"/compile_cold", func(b *testing.B) {
			for b.Loop() {
				eng, err := e.ctor(ctx, engine.EngineConfig{}, stubs)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := eng.Compile(ctx, wasm); err != nil {
					b.Fatal(err)
				}
				eng.Close(ctx)
			}
		})
		dir := b.TempDir()
		prime, err := e.ctor(ctx, engine.EngineConfig{CacheDir: dir}, stubs)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := prime.Compile(ctx, wasm); err != nil {
			b.Fatal(err)
		}
		prime.Close(ctx)
		b.Run(e.name+"/compile_cached", func(b *testing.B) {
			for b.Loop() {
				eng, err := e.ctor(ctx, engine.EngineConfig{CacheDir: dir}, stubs)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := eng.Compile(ctx, wasm); err != nil {
					b.Fatal(err)
				}
				eng.Close(ctx)
			}
		})
		eng, err := e.ctor(ctx, engine.EngineConfig{CacheDir: dir}, stubs)
		if err != nil {
			b.Fatal(err)
		}
		mod, err := eng.Compile(ctx, wasm)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(e.name+"/instantiate_go", func(b *testing.B) {
			for b.Loop() {
				in, err := mod.Instantiate(ctx, engine.InstanceConfig{Name: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				in.Close(ctx)
			}
		})
		b.Run(e.name+"/rss_per_instance_go", func(b *testing.B) {
			const n = 50
			var rssTotal, vszTotal float64
			for b.Loop() {
				r, v := perInstance(b, mod, n)
				rssTotal += r
				vszTotal += v
			}
			b.ReportMetric(rssTotal/float64(b.N)/(1<<20), "RSS-MB/instance")
			b.ReportMetric(vszTotal/float64(b.N)/(1<<30), "VSZ-GB/instance")
		})
		eng.Close(ctx)

		f := enginetest.NewFixture(b, e.ctor, engine.EngineConfig{})
		b.Run(e.name+"/instantiate_wat", func(b *testing.B) {
			for b.Loop() {
				in, err := f.Mod.Instantiate(ctx, engine.InstanceConfig{Name: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				in.Close(ctx)
			}
		})
		b.Run(e.name+"/export_call", func(b *testing.B) {
			for b.Loop() {
				if _, err := f.Inst.Call(ctx, "inited"); err != nil {
					b.Fatal(err)
				}
			}
		})
		// loop_add: 1000 guest→host imports per call; ns/op / 1000 is one
		// import crossing (the export call's cost is amortised away).
		b.Run(e.name+"/import_x1000", func(b *testing.B) {
			for b.Loop() {
				if _, err := f.Inst.Call(ctx, "loop_add", 1000); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// perInstance instantiates n instances, returns the RSS and virtual size
// growth per instance, then closes them and returns memory to the OS so
// the next measurement starts from the same floor.
func perInstance(b *testing.B, mod engine.Module, n int) (rssB, vszB float64) {
	ctx := context.Background()
	runtime.GC()
	debug.FreeOSMemory()
	before, vBefore := statm(b)
	ins := make([]engine.Instance, n)
	for i := range ins {
		in, err := mod.Instantiate(ctx, engine.InstanceConfig{Name: "rss"})
		if err != nil {
			b.Fatal(err)
		}
		ins[i] = in
	}
	after, vAfter := statm(b)
	for _, in := range ins {
		in.Close(ctx)
	}
	runtime.GC()
	debug.FreeOSMemory()
	return float64(after-before) / float64(n), float64(vAfter-vBefore) / float64(n)
}

// statm returns the resident and virtual size in bytes.
func statm(b *testing.B) (rss, vsz int64) {
	s, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skipf("SKIPPED LOUDLY: no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(s))
	size, _ := strconv.ParseInt(f[0], 10, 64)
	res, _ := strconv.ParseInt(f[1], 10, 64)
	pg := int64(os.Getpagesize())
	return res * pg, size * pg
}

// BenchmarkHost: the same through host.Host (pool, ABI, registry), with
// the Go conformance capsule: a warm-pool tool call, and one
// capsule:process import round trip ((n1000 - n0) / 1000).
func BenchmarkHost(b *testing.B) {
	if _, err := os.Stat(testcapDir + "/testcap.wasm"); err != nil {
		b.Skipf("SKIPPED LOUDLY: the Go conformance capsule is not built: %v", err)
	}
	for _, e := range engines {
		h := newHost(b, e.name)
		if _, err := h.Load(context.Background(), testcapDir); err != nil {
			b.Fatal(err)
		}
		ctx := host.WithPrincipal(context.Background(), "bench")
		id := strings.Repeat("a", 52)
		for _, bc := range []struct{ name, tool, input string }{
			{"warm_call_echo", "echo", `{"x":1}`},
			{"status_n0", "bench_status", `{"id":"` + id + `","n":0}`},
			{"status_n1000", "bench_status", `{"id":"` + id + `","n":1000}`},
		} {
			b.Run(e.name+"/"+bc.name, func(b *testing.B) {
				for b.Loop() {
					if _, err := h.Call(ctx, "testcap", bc.tool, bc.input); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func newHost(b *testing.B, eng string) *host.Host {
	lb, err := local.New(local.Options{})
	if err != nil {
		b.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	reg, err := registry.New(registry.Config{
		Backends: map[string]sandbox.Backend{"local": lb},
		StateDir: b.TempDir(),
		Logger:   logger,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { reg.Shutdown(context.Background()) })
	h, err := host.New(context.Background(), host.Config{
		Engine:      eng,
		Registry:    reg,
		StateDir:    b.TempDir(),
		Logger:      logger,
		CallTimeout: time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// BenchmarkWarmCallPair is issue 16's engine goal interleaved: a warm
// no-op export call of the WAT fixture ("inited") on wasmtime against the
// same on wazero (goal: wasmtime's ≤ wazero's). One sample is 100 calls;
// reported: each side's median and IQR in ns per call, and the ratio.
func BenchmarkWarmCallPair(b *testing.B) {
	ctx := context.Background()
	const per = 100
	var sides []testutil.Side
	for _, e := range engines {
		f := enginetest.NewFixture(b, e.ctor, engine.EngineConfig{})
		sides = append(sides, testutil.Side{Name: e.name, Run: func() error {
			for range per {
				if _, err := f.Inst.Call(ctx, "inited"); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	times := testutil.Interleave(b, sides, 10)
	for j := range times {
		for i := range times[j] {
			times[j][i] /= per
		}
	}
	med := testutil.ReportSides(b, "ns", sides, times)
	b.ReportMetric(med[wasmtime.Name]/med[wazero.Name], "wasmtime/wazero")
}

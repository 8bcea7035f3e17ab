package component_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
	"github.com/capsule-host/capsule-host/host/internal/wasip2"
	"github.com/capsule-host/capsule-host/host/process"
)

// BenchmarkInstanceMemory: instantiating one pooled instance, the
// linear memory it holds right after (mem-bytes), and the host heap a
// live instance keeps (heap-bytes/inst: linear memories are Go slices in
// wazero, so this includes them), for the componentize-js capsule, for
// the Go testcap as a core module and as a component (goadapt + jco), and
// for the C capsule in both forms, in one run. Run:
// go test -run XXX -bench InstanceMemory -benchtime 5x ./host/component
func BenchmarkInstanceMemory(b *testing.B) {
	funcs := process.HostFuncs(nil) // never called: instantiation makes no host calls
	b.Run("js-component", func(b *testing.B) {
		instances(b, compileComponent(b, componenttest.BuildJS(b, filepath.Join(componenttest.Dir(), "..", "jscap", "capsule.js"), "capsule:guest/capsule", false)))
	})
	testcap := componenttest.Testcap(b) // one module in both forms
	b.Run("go-core", func(b *testing.B) { instances(b, compileCore(b, funcs, testcap)) })
	b.Run("go-component", func(b *testing.B) {
		instances(b, compileComponent(b, componenttest.WrapGo(b, testcap, "capsule:guest/capsule")))
	})
	ccore := func(b *testing.B) string {
		return componenttest.CompileC(b, filepath.Join(componenttest.Dir(), "..", "ccap", "capsule.c"))
	}
	b.Run("c-core", func(b *testing.B) { instances(b, compileCore(b, funcs, ccore(b))) })
	b.Run("c-component", func(b *testing.B) {
		instances(b, compileComponent(b, componenttest.Wrap(b, ccore(b), "capsule:guest/capsule")))
	})
}

// compileComponent compiles the component at path with capsule:process
// and WASI 0.2 served; it is closed with the benchmark.
func compileComponent(b testing.TB, path string) engine.Module {
	m, err := compileHosted(b, parseFile(b, path))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// compileHosted compiles c against what the host serves (1.0.0 to 1.2.0
// and WASI 0.2, with the host's WIT).
func compileHosted(b testing.TB, c *component.Component) (engine.Module, error) {
	funcs := process.HostFuncs(nil)
	hf := func(cfg engine.InstanceConfig) []engine.HostFunc {
		return append(funcs[:len(funcs):len(funcs)], wasip2.Funcs(wasip2.Config{})...)
	}
	return component.Compile(context.Background(), newBenchEngine(b, nil), c, hf, process.Signatures())
}

// compileCore compiles the core module at path; closed with the benchmark.
func compileCore(b *testing.B, funcs []engine.HostFunc, path string) engine.Module {
	ctx := context.Background()
	eng := newBenchEngine(b, funcs)
	bin, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	m, err := eng.Compile(ctx, bin)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(ctx) })
	return m
}

func newBenchEngine(b testing.TB, funcs []engine.HostFunc) engine.Engine {
	e, err := wazero.New(context.Background(), engine.EngineConfig{CacheDir: filepath.Join(componenttest.Dir(), ".cache", "wazero")}, funcs)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func instances(b *testing.B, m engine.Module) {
	ctx := context.Background()
	var mem uint32
	for b.Loop() {
		in, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		mem = in.Memory().Size()
		in.Close(ctx)
	}
	b.ReportMetric(float64(mem), "mem-bytes")
	b.ReportMetric(float64(heldPerInstance(b, m)), "heap-bytes/inst")
}

// heldPerInstance is the host heap that live instances of m keep, each:
// the live heap after a GC with heldInstances of them open, less before.
func heldPerInstance(b *testing.B, m engine.Module) uint64 {
	const heldInstances = 4
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var live []engine.Instance
	for range heldInstances {
		in, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "held"})
		if err != nil {
			b.Fatal(err)
		}
		live = append(live, in)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, in := range live {
		in.Close(ctx)
	}
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return (after.HeapAlloc - before.HeapAlloc) / heldInstances
}

package component_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
	"github.com/capsule-host/capsule-host/host/internal/wasip2"
	"github.com/capsule-host/capsule-host/host/process"
)

// BenchmarkInstanceMemory: instantiating one pooled instance, and the
// linear memory it holds right after (mem-bytes), for the componentize-js
// capsule and for the Go testcap as a core module, in one run. Run:
// go test -run XXX -bench InstanceMemory -benchtime 5x ./host/component
func BenchmarkInstanceMemory(b *testing.B) {
	ctx := context.Background()
	funcs := process.HostFuncs(nil) // never called: instantiation makes no host calls
	b.Run("js-component", func(b *testing.B) {
		eng := newBenchEngine(b, nil)
		bin, err := os.ReadFile(componenttest.BuildJS(b, filepath.Join(componenttest.Dir(), "..", "jscap", "capsule.js"), "capsule:guest/capsule", false))
		if err != nil {
			b.Fatal(err)
		}
		c, err := component.Parse(bin)
		if err != nil {
			b.Fatal(err)
		}
		hf := func(cfg engine.InstanceConfig) []engine.HostFunc {
			return append(funcs[:len(funcs):len(funcs)], wasip2.Funcs(wasip2.Config{})...)
		}
		m, err := component.Compile(ctx, eng, c, hf, process.Signatures())
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(ctx)
		instances(b, m)
	})
	b.Run("go-core", func(b *testing.B) {
		eng := newBenchEngine(b, funcs)
		bin, err := os.ReadFile(filepath.Join(componenttest.Root(), "capsules/testcap/testcap.wasm"))
		if err != nil {
			b.Fatal(err)
		}
		m, err := eng.Compile(ctx, bin)
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(ctx)
		instances(b, m)
	})
}

func newBenchEngine(b *testing.B, funcs []engine.HostFunc) engine.Engine {
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
}

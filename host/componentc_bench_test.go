package host_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
)

// BenchmarkCComponent sets one C capsule's two forms side by side: the
// clang core module loaded as a core capsule, and the same module
// wrapped by jco into a component (the adapter adds a second core
// module and the shims). Each reports its Load with a cold and a warm
// compilation cache (load-cold-ms, load-cached-ms); ns/op is a warm
// echo call, so the difference is what the component path costs per
// call. Run: go test -run '^$' -bench CComponent -benchtime 2000x ./host/
func BenchmarkCComponent(b *testing.B) {
	src := filepath.Join(componenttest.Dir(), "..", "ccap", "capsule.c")
	core := componenttest.CompileC(b, src)
	forms := []struct{ name, wasm string }{
		{"core", core},
		{"component", componenttest.Wrap(b, core, "capsule:guest/capsule")},
	}
	for _, f := range forms {
		b.Run(f.name, func(b *testing.B) {
			if f.name == "component" && enginetest.HostEngine() == "wasmtime" {
				b.Skip("SKIP: the wasmtime engine refuses components (ErrLinkUnsupported, RFC §17)")
			}
			cache := b.TempDir()
			load := func() (*env, time.Duration) {
				e := newHost(b, func(c *host.Config) { c.CallTimeout = time.Minute; c.CacheDir = cache })
				t0 := time.Now()
				if _, err := e.h.Load(context.Background(), capsuleDir(b, "ccap", f.wasm, ccapManifest)); err != nil {
					b.Fatal(err)
				}
				return e, time.Since(t0)
			}
			e1, cold := load()
			_ = e1.h.Close(context.Background())
			e, cached := load()
			ctx := host.WithPrincipal(context.Background(), "bench")
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.h.Call(ctx, "ccap", "echo", `{"n":1}`); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cold.Microseconds())/1000, "load-cold-ms")
			b.ReportMetric(float64(cached.Microseconds())/1000, "load-cached-ms")
		})
	}
}

package host_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
)

// BenchmarkJSComponent: Load of the componentize-js capsule with a cold
// and a warm compilation cache (reported as load-cold-s, load-cached-s),
// then warm echo calls, the number to set beside BenchmarkCall's go/warm
// and wat/warm. Run: go test -run XXX -bench JSComponent -benchtime 200x ./host
func BenchmarkJSComponent(b *testing.B) {
	comp := componenttest.BuildJS(b, filepath.Join(componenttest.Dir(), "..", "jscap", "capsule.js"), "capsule:guest/capsule", false)
	cache := b.TempDir()
	load := func() (*env, time.Duration) {
		e := newHost(b, func(c *host.Config) { c.CallTimeout = time.Minute; c.CacheDir = cache })
		t0 := time.Now()
		if _, err := e.h.Load(context.Background(), capsuleDir(b, "jscap", comp, jscapManifest)); err != nil {
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
		if _, err := e.h.Call(ctx, "jscap", "echo", "{}"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(cold.Seconds(), "load-cold-s")
	b.ReportMetric(cached.Seconds(), "load-cached-s")
}

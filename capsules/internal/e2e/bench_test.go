package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host"
)

// Costs of a tool call through the Go SDK on a warm pool, side by side:
//
//	go test -run '^$' -bench . -benchtime 2s ./capsules/internal/e2e/
//
// echo: SDK dispatch and JSON only (no import). status: one 1.1.0 import
// with a 52-byte ID and a lifted error-code (no-such-process, so no
// process is involved). bench_status runs n status imports inside one
// call: (n1000 - n0) / 1000 is one import round trip through the SDK's
// bindings (lowering, return area, lifting the error-code) and the
// host's.
func BenchmarkToolCall(b *testing.B) {
	e := newBenchEnv(b)
	ctx := host.WithPrincipal(context.Background(), "alice")
	id := strings.Repeat("a", 52)
	for _, bc := range []struct{ name, tool, input string }{
		{"echo", "echo", `{"x":1}`},
		{"status_no_such_process", "status", `{"id":"` + id + `"}`},
		{"bench_status_n0", "bench_status", `{"id":"` + id + `","n":0}`},
		{"bench_status_n1000", "bench_status", `{"id":"` + id + `","n":1000}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := e.Call(ctx, "testcap", bc.tool, bc.input); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/registry"
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

// BenchmarkShellList is the guest's share of listing many processes: the
// shell capsule's list_processes over PERF_N (default 500) live `sleep`
// processes of one principal, on the in-process bwrap backend (no keeper:
// every figure is a memory read), so what it measures is the
// list-processes import's lowering, the guest's lifting and JSON
// encoding, and the host's output handling. The goal is ≤ 10 ms
// at 500 through the daemon (cmd/capsule-host BenchmarkListProcesses).
func BenchmarkShellList(b *testing.B) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("PERF_N")); err == nil && v > 0 {
		n = v
	}
	h, reg := newHostRegQuotas(b, registry.Quotas{MaxConcurrent: n, MaxRetained: n, MaxEntries: n + 8}, "shell")
	ctx := host.WithPrincipal(context.Background(), "alice")
	for i := range n {
		if _, err := h.Call(ctx, "shell", "spawn_background_process", fmt.Sprintf(`{"command":"exec sleep 3600","label":"s%d"}`, i)); err != nil {
			b.Fatalf("spawn %d: %v", i, err)
		}
	}
	b.Run(fmt.Sprintf("list-%d", n), func(b *testing.B) {
		cpu := testutil.CPUTime()
		for b.Loop() {
			res, err := h.Call(ctx, "shell", "list_processes", `{}`)
			if err != nil {
				b.Fatal(err)
			}
			if got := strings.Count(res.Output, `"id":`); got != n {
				b.Fatalf("list_processes: %d processes, want %d", got, n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/proc")
		testutil.ReportCPU(b, cpu)
	})
	// The registry's share alone: the same list without a guest.
	rctx := registry.WithCaller(context.Background(), registry.Caller{Capsule: "shell", Principal: "alice"})
	b.Run(fmt.Sprintf("registry-%d", n), func(b *testing.B) {
		cpu := testutil.CPUTime()
		for b.Loop() {
			if is, err := reg.List(rctx, nil); err != nil || len(is) != n {
				b.Fatalf("List: %d (%v), want %d", len(is), err, n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/proc")
		testutil.ReportCPU(b, cpu)
	})
}

// BenchmarkShellRead is the agent's most frequent call: the shell
// capsule's read_process_logs of a live process's 6 bytes of stdout
// (status, then read-since of both streams), on the in-process bwrap
// backend.
func BenchmarkShellRead(b *testing.B) {
	h, _ := newHostRegQuotas(b, registry.Quotas{MaxConcurrent: 4, MaxRetained: 4, MaxEntries: 8}, "shell")
	ctx := host.WithPrincipal(context.Background(), "alice")
	res, err := h.Call(ctx, "shell", "spawn_background_process", `{"command":"echo hello; exec sleep 600"}`)
	if err != nil {
		b.Fatal(err)
	}
	id := res.Output[strings.Index(res.Output, `"id":"`)+6:]
	id = id[:strings.IndexByte(id, '"')]
	in := `{"id":"` + id + `"}`
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err = h.Call(ctx, "shell", "read_process_logs", in)
		if err == nil && strings.Contains(res.Output, "hello") {
			break
		}
		if time.Now().After(end) {
			b.Fatalf("read_process_logs: %v %v", res, err)
		}
	}
	cpu := testutil.CPUTime()
	for b.Loop() {
		if res, err := h.Call(ctx, "shell", "read_process_logs", in); err != nil || !strings.Contains(res.Output, "hello") {
			b.Fatalf("read_process_logs: %v %v", res, err)
		}
	}
	testutil.ReportCPU(b, cpu)
}

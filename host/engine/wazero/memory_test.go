package wazero_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
	"github.com/capsule-host/capsule-host/internal/procfs"
)

// memhog instantiates testdata/memhog.wasm under a limit of pages.
func memhog(t testing.TB, pages uint32) (engine.Engine, engine.Instance) {
	t.Helper()
	wasm, err := os.ReadFile("testdata/memhog.wasm")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := wazero.New(ctx, engine.EngineConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	mod, err := e.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	in, err := mod.Instantiate(ctx, engine.InstanceConfig{Name: "memhog", MemoryLimitPages: pages})
	if err != nil {
		t.Fatal(err)
	}
	return e, in
}

func rssMiB(t testing.TB) int {
	fp, err := procfs.ReadFootprint(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return fp.RSSKiB >> 10
}

// A discarded instance's memory goes back to the system when it closes
// (RSS, not the Go heap): 192 MiB written, then the instance closed.
func TestClosedInstanceReturnsMemory(t *testing.T) {
	_, in := memhog(t, 4096)
	before := rssMiB(t)
	res, err := in.Call(context.Background(), "fill", 3072)
	if err != nil || res[0] != 3072 {
		t.Fatalf("fill: %v %v", res, err)
	}
	during := rssMiB(t)
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := rssMiB(t)
	t.Logf("RSS %d MiB before, %d with 192 MiB written, %d after close", before, during, after)
	if during-before < 150 {
		t.Fatalf("RSS grew by %d MiB only: the fill did not touch the memory, the test proves nothing", during-before)
	}
	if after-before > 48 {
		t.Fatalf("RSS %d MiB above the start after the instance closed: its memory was kept", after-before)
	}
}

// A guest that grows to its limit and spins is stopped by the deadline;
// its grows never copy (the limit is reserved at once), so the call ends
// soon after the deadline. The bound here only says it ended; the
// overshoot is a figure of BenchmarkGrowInterrupt.
func TestGrowingGuestStopsAtDeadline(t *testing.T) {
	_, in := memhog(t, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := in.Call(ctx, "hog")
	if !errors.Is(err, engine.ErrInterrupted) {
		t.Fatalf("hog: %v, want ErrInterrupted", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the call ran %v past a 100 ms deadline", d)
	}
}

// BenchmarkGrowInterrupt: how long past its deadline a call that grows
// its memory to 256 MiB page by page (touching each) runs, and what one
// 256 MiB fill costs (grow, then write every byte).
func BenchmarkGrowInterrupt(b *testing.B) {
	b.Run("overshoot", func(b *testing.B) {
		var over time.Duration
		for range b.N {
			_, in := memhog(b, 4096)
			const d = 20 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), d)
			start := time.Now()
			in.Call(ctx, "hog")
			over += time.Since(start) - d
			cancel()
			in.Close(context.Background())
		}
		b.ReportMetric(float64(over.Microseconds())/1000/float64(b.N), "overshoot-ms")
	})
	b.Run("fill256MiB", func(b *testing.B) {
		for range b.N {
			_, in := memhog(b, 4096)
			if _, err := in.Call(context.Background(), "fill", 4096); err != nil {
				b.Fatal(err)
			}
			in.Close(context.Background())
		}
	})
}

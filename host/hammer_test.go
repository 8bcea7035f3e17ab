package host_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
)

// Hammer: 32 goroutines mix healthy calls, tool errors, traps, timeouts
// and reloads against a small pool. Every outcome must be the typed one,
// the pool must never exceed max, and nothing may leak once the host is
// closed. Run with -race.
func TestHammer(t *testing.T) {
	e := newHost(t, func(c *host.Config) { c.CallTimeout = 50 * time.Millisecond })
	before := runtime.NumGoroutine() // the registry's own goroutines included
	dir := capsuleDir(t, "tools", toolsWasm, "[pool]\nmin_idle = 2\nmax = 6\nidle_ttl = \"1s\"\n")
	if _, err := e.h.Load(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	dur := 2 * time.Second
	if testing.Short() {
		dur = 300 * time.Millisecond
	}
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	var ok, toolErr, traps, timeouts atomic.Int64
	tools := []string{"noop", "echo", "fail", "trap", "noop", "spin", "oob", "noop"}
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := host.WithPrincipal(context.Background(), fmt.Sprintf("p%d", g%4))
			for i := g; time.Now().Before(stop); i++ {
				tool := tools[i%len(tools)]
				_, err := e.h.Call(ctx, "tools", tool, "{}")
				var te *host.TrapError
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, host.ErrToolFailed) && tool == "fail":
					toolErr.Add(1)
				case errors.As(err, &te) && (tool == "trap" || tool == "oob"):
					traps.Add(1)
				case errors.Is(err, host.ErrTimeout):
					timeouts.Add(1)
				default:
					t.Errorf("%s: unexpected %v", tool, err)
					return
				}
				if c, ok := e.h.Capsule("tools"); ok {
					if st := c.Stats(); st.Live > 6 {
						t.Errorf("live %d > max 6: %+v", st.Live, st)
						return
					}
				}
			}
		}()
	}
	// Reload a few times while the hammer runs.
	for i := 0; i < 3; i++ {
		time.Sleep(dur / 4)
		if _, err := e.h.Load(context.Background(), dir); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	t.Logf("ok %d, tool errors %d, traps %d, timeouts %d", ok.Load(), toolErr.Load(), traps.Load(), timeouts.Load())
	if ok.Load() == 0 || traps.Load() == 0 || timeouts.Load() == 0 {
		t.Fatal("the mix did not exercise every path")
	}
	if err := e.h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

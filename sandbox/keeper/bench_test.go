package keeper_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

func measure(tb testing.TB, pid int) procfs.Footprint {
	fp, err := procfs.ReadFootprint(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return fp
}

// BenchmarkKeeperMemory compares the keeper's cost per persistent process
// (N sleep processes) with a tmux server's per session, in one run. Run
// it once per N: go test -run '^$' -bench KeeperMemory -benchtime=1x;
// KEEPER_BENCH_N="10,100" picks the Ns (default 10,100,500).
func BenchmarkKeeperMemory(b *testing.B) {
	ns := []int{10, 100, 500}
	if env := os.Getenv("KEEPER_BENCH_N"); env != "" {
		ns = nil
		for _, f := range strings.Split(env, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 1 {
				ns = append(ns, n)
			}
		}
	}
	for _, n := range ns {
		b.Run(fmt.Sprintf("keeper-%d", n), func(b *testing.B) {
			for range b.N {
				benchKeeper(b, n)
			}
		})
		b.Run(fmt.Sprintf("tmux-%d", n), func(b *testing.B) {
			for range b.N {
				benchTmux(b, n)
			}
		})
	}
}

// benchKeeperStart starts a keeper on a fresh directory with cfg and
// dials it; end stops it with everything it runs and removes the dir.
func benchKeeperStart(b *testing.B, cfg keeper.Config) (ctx context.Context, c *keeper.Client, p *keeper.Process, end func()) {
	dir, err := os.MkdirTemp("", "keeper-test-bench-")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Dir = dir
	if p, err = keeper.Start(cfg); err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	if c, err = keeper.Dial(ctx, dir); err != nil {
		b.Fatal(err)
	}
	return ctx, c, p, func() {
		if err := c.Shutdown(ctx, true); err != nil {
			b.Error(err)
		}
		c.Close()
		<-p.Done()
		cancel()
		os.RemoveAll(dir)
	}
}

func benchKeeper(b *testing.B, n int) {
	ctx, c, p, end := benchKeeperStart(b, keeper.Config{})
	defer end()
	sp := spec("keeper-test-bench", "/usr/bin/sleep", "1000")
	sp.Output.SpillBytes = 0
	var base procfs.Footprint
	for i := 0; i < n; i++ {
		if _, err := c.Start(ctx, sp); err != nil {
			b.Fatal(err)
		}
		if i == testutil.Warm(n)-1 {
			base = measure(b, p.PID)
		}
	}
	all := measure(b, p.PID)
	testutil.ReportFootprint(b, base, all, n)
	b.Logf("keeper N=%d: %d processes %+v, %d processes %+v", n, testutil.Warm(n), base, n, all)
}

func benchTmux(b *testing.B, n int) {
	base, all := testutil.TmuxFootprint(b, n)
	testutil.ReportFootprint(b, base, all, n)
	b.Logf("tmux N=%d: %d sessions %+v, %d sessions %+v", n, testutil.Warm(n), base, n, all)
}

// BenchmarkKeeperStop is the keeper's share of a daemon's stop of N
// processes (KEEPER_STOP_N, default 500 `sleep`s on the local backend),
// without the daemon: N Terminate requests in flight on one connection,
// as the registry sends them, until the last answers (each answers once
// its exit is recorded and durable). group is the group commit, each the
// old fsync pair per record (Config.SyncEach), side by side in one run.
//
//	go test -run '^$' -bench KeeperStop -benchtime 1x ./sandbox/keeper
func BenchmarkKeeperStop(b *testing.B) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("KEEPER_STOP_N")); err == nil && v > 0 {
		n = v
	}
	for _, each := range []bool{false, true} {
		name := "group"
		if each {
			name = "each"
		}
		b.Run(fmt.Sprintf("%s-%d", name, n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				benchKeeperStop(b, n, each)
			}
		})
	}
}

func benchKeeperStop(b *testing.B, n int, each bool) {
	ctx, c, _, end := benchKeeperStart(b, keeper.Config{SyncEach: each})
	defer end()
	sp := spec("keeper-test-bench", "/usr/bin/sleep", "1000")
	sp.Grace = 30 * time.Second // as the daemon's (a loaded machine settles 500 slowly)
	refs := make([]sandbox.Ref, n)
	for i := range refs {
		st, err := c.Start(ctx, sp)
		if err != nil {
			b.Fatal(err)
		}
		refs[i] = st.Ref
	}
	b.StartTimer()
	start := time.Now()
	errs := make(chan error, n)
	for _, ref := range refs {
		go func() {
			_, err := c.Terminate(ctx, ref, sandbox.Graceful)
			errs <- err
		}()
	}
	for range refs {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "stop-ms")
	b.StopTimer()
}

package keeper_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// footprint is what a server process costs: resident memory, open
// descriptors and threads.
type footprint struct{ rssKiB, fds, threads int }

func measure(tb testing.TB, pid int) footprint {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var fp footprint
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ":")
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch k {
		case "VmRSS":
			fp.rssKiB = n
		case "Threads":
			fp.threads = n
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		tb.Fatal(err)
	}
	fp.fds = len(ents)
	return fp
}

// report states the per-process cost as the growth from 1 to n processes
// (the server's fixed cost, binary and runtime included, cancels out).
func report(b *testing.B, one, all footprint, n int) {
	per := func(a, z int) float64 { return float64(z-a) / float64(n-1) }
	b.ReportMetric(per(one.rssKiB, all.rssKiB), "KiB-rss/proc")
	b.ReportMetric(per(one.fds, all.fds), "fds/proc")
	b.ReportMetric(per(one.threads, all.threads), "threads/proc")
	b.ReportMetric(float64(all.rssKiB), "KiB-rss-total")
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
			if _, err := exec.LookPath("tmux"); err != nil {
				b.Skip("SKIP: tmux is not installed: no tmux comparison")
			}
			for range b.N {
				benchTmux(b, n)
			}
		})
	}
}

func benchKeeper(b *testing.B, n int) {
	dir, err := os.MkdirTemp("", "keeper-test-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p, err := keeper.Start(keeper.Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := keeper.Dial(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Shutdown(ctx, true); err != nil {
			b.Error(err)
		}
		c.Close()
		<-p.Done()
	}()
	sp := spec("keeper-test-bench", "/usr/bin/sleep", "1000")
	sp.Output.SpillBytes = 0
	var one footprint
	for i := 0; i < n; i++ {
		if _, err := c.Start(ctx, sp); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			one = measure(b, p.PID)
		}
	}
	all := measure(b, p.PID)
	report(b, one, all, n)
	b.Logf("keeper N=%d: 1 process %+v, %d processes %+v", n, one, n, all)
}

func benchTmux(b *testing.B, n int) {
	sock := fmt.Sprintf("keeper-test-bench-%d-%d", os.Getpid(), n)
	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", append([]string{"-L", sock, "-f", "/dev/null"}, args...)...).Output()
		if err != nil {
			b.Fatalf("tmux %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	var one footprint
	var pid int
	for i := 0; i < n; i++ {
		tmux("new-session", "-d", "sleep 1000")
		if i == 0 {
			pid, _ = strconv.Atoi(tmux("display-message", "-p", "#{pid}"))
			path := tmux("display-message", "-p", "#{socket_path}")
			defer func() {
				exec.Command("tmux", "-L", sock, "kill-server").Run()
				waitDead(b, pid, 0, 30*time.Second)
				os.Remove(path)
			}()
			one = measure(b, pid)
		}
	}
	all := measure(b, pid)
	report(b, one, all, n)
	b.Logf("tmux N=%d: 1 session %+v, %d sessions %+v", n, one, n, all)
}

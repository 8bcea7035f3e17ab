//go:build !leanclient

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// adoptTook is the registry's own figure in the daemon log.
var adoptTook = regexp.MustCompile(`msg="journal adopted".* running=(\d+) .*took=(\S+)`)

// BenchmarkReadopt is the re-adoption figure: READOPT_N (default
// 1000) live persistent processes, kill -9 of serve, and a new serve on
// the same state; reported: the time from its exec to the first served
// call (goal ≤ 1 s), and the registry's share (Adopt: the journal read,
// one attach per process, the orphan sweep). READOPT_LOG=FILE keeps the
// daemon log (both serves, time-stamped) to see where the start went.
func BenchmarkReadopt(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("READOPT_N")); err == nil && v > 0 {
		n = v
	}
	bin := builtBinary(b)
	for i := 0; i < b.N; i++ {
		first, adopt, got := readoptOnce(b, bin, n)
		b.ReportMetric(float64(first.Milliseconds()), "first-call-ms")
		b.ReportMetric(float64(adopt.Milliseconds()), "adopt-ms")
		b.ReportMetric(float64(got), "adopted")
	}
}

// readoptOnce keeps the timer running through its set-up (the figures
// are its own metrics): an iteration then outlasts any benchtime, so the
// benchmark runs once, not once per 1,000 spawns the framework would ask
// for if it saw only the restart.
func readoptOnce(b *testing.B, bin string, n int) (first, adopt time.Duration, got int) {
	dir := b.TempDir()
	per := 64
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(fmt.Sprintf("[quotas]\nmax_concurrent = %d\nmax_retained = %d\nmax_entries = %d\n", per, per, n+per)), 0o600)
	mark := fmt.Sprintf("readopt-%d", time.Now().UnixNano())
	d1 := startServe(b, bin, dir)
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(b, c, d1)
	for i := 0; i < n; i++ {
		if _, code := shellCall(b, c, fmt.Sprintf("p%d", i/per), "spawn_background_process", map[string]any{"command": "exec sleep 1000 # " + mark}); code != "" {
			b.Fatalf("spawn %d: %s", i, code)
		}
	}
	d1.cmd.Process.Signal(syscall.SIGKILL)
	<-d1.exited
	d2 := startServe(b, bin, dir, "--on-shutdown", "stop")
	first = awaitServing(b, c, d2)
	log, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
	if to := os.Getenv("READOPT_LOG"); to != "" { // both serves' logs, to see where the start went
		os.WriteFile(to, log, 0o600)
	}
	ms := adoptTook.FindAllSubmatch(log, -1)
	if len(ms) == 0 {
		b.Fatal("no adoption line in the daemon log")
	}
	last := ms[len(ms)-1]
	got, _ = strconv.Atoi(string(last[1]))
	adopt, _ = time.ParseDuration(string(last[2]))
	endServe(b, d2)
	return first, adopt, got
}

// BenchmarkLiveCost is the cost figure: daemon plus keeper per
// live persistent process (N `sleep` processes spawned through the shell
// capsule), against a tmux server per session, in the same run.
// LIVECOST_N picks the Ns (default 10,100,500).
func BenchmarkLiveCost(b *testing.B) {
	ns := []int{10, 100, 500}
	if env := os.Getenv("LIVECOST_N"); env != "" {
		ns = nil
		for _, f := range strings.Split(env, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 1 {
				ns = append(ns, n)
			}
		}
	}
	bin := builtBinary(b)
	for _, n := range ns {
		b.Run(fmt.Sprintf("daemon+keeper-%d", n), func(b *testing.B) {
			for range b.N {
				base, all := liveCost(b, bin, n)
				testutil.ReportFootprint(b, base, all, n)
			}
		})
		b.Run(fmt.Sprintf("tmux-%d", n), func(b *testing.B) {
			for range b.N {
				base, all := testutil.TmuxFootprint(b, n)
				testutil.ReportFootprint(b, base, all, n)
			}
		})
	}
}

func liveCost(b *testing.B, bin string, n int) (base, all procfs.Footprint) {
	dir := b.TempDir()
	const per = 64
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(fmt.Sprintf("[quotas]\nmax_concurrent = %d\nmax_retained = %d\nmax_entries = %d\n", per, per, n+per)), 0o600)
	d := startServe(b, bin, dir, "--on-shutdown", "stop")
	defer endServe(b, d)
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(b, c, d)
	measure := func() procfs.Footprint {
		lock, err := os.ReadFile(keeperLock(dir))
		if err != nil {
			b.Fatal(err)
		}
		kpid, _ := strconv.Atoi(strings.Fields(string(lock))[0])
		df, err1 := procfs.ReadFootprint(d.cmd.Process.Pid)
		kf, err2 := procfs.ReadFootprint(kpid)
		if err1 != nil || err2 != nil {
			b.Fatal(err1, err2)
		}
		// The parts too: the daemon's RSS swings by megabytes with its
		// heap, which can hide the keeper's per-process figure.
		b.Logf("N=%d: keeper RSS %d KiB, fds %d; daemon RSS %d KiB, fds %d", n, kf.RSSKiB, kf.FDs, df.RSSKiB, df.FDs)
		return df.Add(kf)
	}
	for i := 0; i < n; i++ {
		if _, code := shellCall(b, c, fmt.Sprintf("p%d", i/per), "spawn_background_process", map[string]any{"command": "exec sleep 1000"}); code != "" {
			b.Fatalf("spawn %d: %s", i, code)
		}
		if i == testutil.Warm(n)-1 {
			base = measure()
		}
	}
	all = measure()
	// Logged as well: a stop that fails at the deferred endServe (a
	// loaded machine) fails the run before its metrics are reported.
	b.Logf("N=%d: RSS %d → %d KiB, fds %d → %d, threads %d → %d (base after %d)", n, base.RSSKiB, all.RSSKiB, base.FDs, all.FDs, base.Threads, all.Threads, testutil.Warm(n))
	return base, all
}

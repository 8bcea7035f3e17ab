//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// listN is the number of live processes of the listing and shutdown
// benchmarks: PERF_N, default 500 (the figure).
func listN() int {
	if v, err := strconv.Atoi(os.Getenv("PERF_N")); err == nil && v > 0 {
		return v
	}
	return 500
}

// benchShellDaemon is an in-process daemon serving the bundled shell capsule
// with quotas that let one principal hold n live processes.
func benchShellDaemon(b *testing.B, n int, onShutdown string) *testDaemon {
	shell, err := filepath.Abs("../../capsules/shell")
	if err != nil {
		b.Fatal(err)
	}
	return startDaemon(b, func(c *config.Config) {
		c.Capsules = []string{shell}
		c.Backends.Enabled = []string{"bwrap"}
		c.Quotas = config.Quotas{MaxConcurrent: n, MaxRetained: n, MaxEntries: n + 8}
		c.Processes.OnShutdown = onShutdown
		c.ShutdownGrace = config.Duration(60 * time.Second)
	})
}

// inParallel runs f(i) for i in [from, to), four at a time, and fails b
// with every error, naming its i.
func inParallel(b *testing.B, from, to int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, to-from)
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- fmt.Errorf("spawn %d: %w", i, err)
				}
			}
		})
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// spawnSleepers starts n `sleep` processes for alice through the shell
// capsule, four callers at a time.
func spawnSleepers(b *testing.B, h *host.Host, n int) {
	b.Helper()
	ctx := host.WithPrincipal(context.Background(), "alice")
	inParallel(b, 0, n, func(i int) error {
		_, err := h.Call(ctx, "shell", "spawn_background_process", fmt.Sprintf(`{"command":"exec sleep 3600","label":"s%d"}`, i))
		return err
	})
}

// BenchmarkListProcesses is the per-process cost of listing: one
// principal with PERF_N (500) live persistent processes, listed by the
// shell capsule's list_processes (goal ≤ 10 ms at 500: the list-processes
// import lowers every process-info into the guest, which JSON-encodes
// them) and by the HTTP API (no guest), side by side in one run.
//
//	go test -run '^$' -bench ListProcesses -benchtime 20x ./cmd/capsule-host
func BenchmarkListProcesses(b *testing.B) {
	n := listN()
	d := benchShellDaemon(b, n, config.OnShutdownStop)
	spawnSleepers(b, d.rt.Host, n)
	ctx := host.WithPrincipal(context.Background(), "alice")
	b.Run(fmt.Sprintf("guest-%d", n), func(b *testing.B) {
		cpu := testutil.CPUTime()
		var ts []time.Duration
		for b.Loop() {
			t0 := time.Now()
			res, err := d.rt.Host.Call(ctx, "shell", "list_processes", `{}`)
			ts = append(ts, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			var out struct {
				Processes []json.RawMessage `json:"processes"`
			}
			if err := json.Unmarshal([]byte(res.Output), &out); err != nil || len(out.Processes) != n {
				b.Fatalf("list_processes: %d processes (%v), want %d", len(out.Processes), err, n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/proc")
		testutil.ReportCPU(b, cpu)
		testutil.ReportSide(b, "guest", "ms", ts)
	})
	b.Run(fmt.Sprintf("http-%d", n), func(b *testing.B) {
		c := api.NewUnix(d.sock)
		cpu := testutil.CPUTime()
		var ts []time.Duration
		for b.Loop() {
			t0 := time.Now()
			ps, err := c.Processes(context.Background(), "shell", "alice")
			ts = append(ts, time.Since(t0))
			if err != nil || len(ps) != n {
				b.Fatalf("processes: %d (%v), want %d", len(ps), err, n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/proc")
		testutil.ReportCPU(b, cpu) // the daemon's; the keeper's is its own process
		testutil.ReportSide(b, "http", "ms", ts)
	})
}

// BenchmarkShutdown is the shutdown figure: a built `serve` with
// PERF_N (500) live persistent processes of one principal, SIGTERM, and
// the time until the process exits (goal ≤ 1 s), under on_shutdown =
// stop (every process stopped: SIGTERM, grace, SIGKILL) and keep (every
// process left to its keeper, journaled, for the next daemon). stop-each
// is stop with the keeper's exit records fsynced one by one
// (CAPSULE_KEEPER_SYNC_EACH=1), the baseline of the group commit (RFC §16),
// side by side in the same run.
//
// floor is the kernel's share, no capsule-host at all: n bwrap sandboxes
// around the same sleep, SIGTERM to every one, until all are reaped (RFC
// §16, "The floor of a stop of 500").
//
//	go test -run '^$' -bench Shutdown -benchtime 1x ./cmd/capsule-host
func BenchmarkShutdown(b *testing.B) {
	n := listN()
	b.Run(fmt.Sprintf("floor-%d", n), func(b *testing.B) {
		for range b.N {
			b.ReportMetric(float64(bwrapFloor(b, n).Milliseconds()), "shutdown-ms")
		}
	})
	bin := builtBinary(b)
	for _, c := range []struct {
		name, mode string
		env        []string
	}{
		{"stop", config.OnShutdownStop, nil},
		{"stop-each", config.OnShutdownStop, []string{"CAPSULE_KEEPER_SYNC_EACH=1"}},
		{"keep", config.OnShutdownKeep, nil},
	} {
		b.Run(fmt.Sprintf("%s-%d", c.name, n), func(b *testing.B) {
			// The timer runs through the set-up too (ns/op is not the
			// figure, shutdown-ms is): an iteration then takes longer
			// than any benchtime, so each sub-benchmark runs once. With
			// a stopped timer the framework saw 0.1 s per iteration and
			// asked for 20, each leaving 500 kept processes behind.
			for range b.N {
				d, dir, done := serveWithSleepers(b, bin, n, c.mode, c.env...)
				start := time.Now()
				endServe(b, d)
				b.ReportMetric(float64(time.Since(start).Milliseconds()), "shutdown-ms")
				if to := os.Getenv("PERF_LOG"); to != "" { // serve's log, to see where the time went
					logb, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
					os.WriteFile(to, logb, 0o600)
				}
				done()
			}
		})
	}
}

// serveWithSleepers starts a built serve under the on_shutdown mode (with
// env added to its environment) and n `sleep` processes for alice through the shell capsule's HTTP call.
//
// done kills what the iteration left (keep mode leaves the sleepers with
// their keeper): every process started with its unique sleep duration,
// and the keeper, named by its state directory.
func serveWithSleepers(b *testing.B, bin string, n int, mode string, env ...string) (_ *daemonProc, dir string, done func()) {
	b.Helper()
	dir = b.TempDir()
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(fmt.Sprintf("[quotas]\nmax_concurrent = %d\nmax_retained = %d\nmax_entries = %d\n", n, n, n+8)), 0o600)
	d := startServeEnv(b, bin, dir, env, "--on-shutdown", mode)
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	awaitServing(b, c, d)
	mark := uniqueSleep()
	done = func() { killMarked(mark); killMarked(dir) }
	b.Cleanup(done)
	spawnAPI(b, c, 0, n, mark)
	return d, dir, done
}

// bwrapFloor starts n bubblewrap sandboxes with the namespaces and mounts
// the daemon's bwrap backend gives a process (sandbox/bwrap; without its
// per-daemon binds), each around a sleep in its own process group, then
// SIGTERMs every group at once and returns the time until the last is
// reaped.
func bwrapFloor(b *testing.B, n int) time.Duration {
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skipf("SKIP: the floor needs bwrap (make deps installs it): %v", err)
	}
	mark := uniqueSleep()
	cmds := make([]*exec.Cmd, 0, n)
	waited := false
	defer func() { // a failed start leaves no sandbox and no zombie
		if !waited {
			killMarked(mark)
			for _, c := range cmds {
				c.Process.Kill()
				c.Wait()
			}
		}
	}()
	for range n {
		c := exec.Command(bw, "--die-with-parent", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net", "--new-session",
			"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--", "/bin/sh", "-c", "exec sleep "+mark)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	// Every sandbox is up once its sleep runs (ps finds the mark n times).
	for deadline := time.Now().Add(2 * time.Minute); len(markedPIDs(mark)) < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d sandboxes running after 2 min", len(markedPIDs(mark)), n)
		}
	}
	start := time.Now()
	for _, c := range cmds {
		syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	// The waits are bounded: a sandbox SIGTERM did not end is killed.
	bound := time.AfterFunc(time.Minute, func() {
		killMarked(mark)
		for _, c := range cmds {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	})
	defer bound.Stop()
	for _, c := range cmds {
		c.Wait()
	}
	waited = true
	took := time.Since(start)
	if took >= time.Minute {
		b.Fatalf("%d bwrap sandboxes not all gone a minute after SIGTERM", n)
	}
	return took
}

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

// TmuxFootprint starts a private tmux server with n detached `sleep 1000`
// sessions and returns its footprint after Warm(n) sessions and with n:
// the anchor the keeper's and the daemon's per-process cost are measured
// against, in the same run. The server is killed before it returns. It
// skips loudly when tmux is not installed.
func TmuxFootprint(tb testing.TB, n int) (base, all procfs.Footprint) {
	tb.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		tb.Skip("SKIP: tmux is not installed (make test installs it): no tmux comparison")
	}
	sock := fmt.Sprintf("capsule-bench-%d-%d", os.Getpid(), n)
	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", append([]string{"-L", sock, "-f", "/dev/null"}, args...)...).Output()
		if err != nil {
			tb.Fatalf("tmux %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	measure := func(pid int) procfs.Footprint {
		fp, err := procfs.ReadFootprint(pid)
		if err != nil {
			tb.Fatal(err)
		}
		return fp
	}
	var pid int
	for i := 0; i < n; i++ {
		tmux("new-session", "-d", "sleep 1000")
		if i == 0 {
			pid, _ = strconv.Atoi(tmux("display-message", "-p", "#{pid}"))
			path := tmux("display-message", "-p", "#{socket_path}")
			defer func() {
				exec.Command("tmux", "-L", sock, "kill-server").Run()
				for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
					if _, err := procfs.ReadStat(pid); err != nil {
						break
					}
				}
				os.Remove(path)
			}()
		}
		if i == Warm(n)-1 {
			base = measure(pid)
		}
	}
	return base, measure(pid)
}

// Warm is how many of n processes a footprint benchmark starts before it
// takes its base measurement: a tenth, at least one. The first calls of a
// daemon allocate what it then reuses (a pooled instance, buffers, a GC
// target), so a base taken after the first process would count that
// against the processes (and make small-n figures negative).
func Warm(n int) int { return max(1, n/10) }

// ReportFootprint states the per-process cost as the growth from Warm(n)
// to n processes (the server's fixed cost, binary and runtime included,
// cancels out), and the total.
func ReportFootprint(b *testing.B, base, all procfs.Footprint, n int) {
	per := func(a, z int) float64 { return float64(z-a) / float64(n-Warm(n)) }
	b.ReportMetric(per(base.RSSKiB, all.RSSKiB), "KiB-rss/proc")
	b.ReportMetric(per(base.FDs, all.FDs), "fds/proc")
	b.ReportMetric(per(base.Threads, all.Threads), "threads/proc")
	b.ReportMetric(float64(all.RSSKiB), "KiB-rss-total")
}

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
// sessions and returns its footprint with one session and with n: the
// anchor the keeper's and the daemon's per-process cost are measured
// against, in the same run. The server is killed before it returns. It
// skips loudly when tmux is not installed.
func TmuxFootprint(tb testing.TB, n int) (one, all procfs.Footprint) {
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
			one = measure(pid)
		}
	}
	return one, measure(pid)
}

// ReportFootprint states the per-process cost as the growth from 1 to n
// processes (the server's fixed cost, binary and runtime included, cancels
// out), and the total.
func ReportFootprint(b *testing.B, one, all procfs.Footprint, n int) {
	per := func(a, z int) float64 { return float64(z-a) / float64(n-1) }
	b.ReportMetric(per(one.RSSKiB, all.RSSKiB), "KiB-rss/proc")
	b.ReportMetric(per(one.FDs, all.FDs), "fds/proc")
	b.ReportMetric(per(one.Threads, all.Threads), "threads/proc")
	b.ReportMetric(float64(all.RSSKiB), "KiB-rss-total")
}

package local_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// What a live process costs the host: OS threads, resident memory, fds.
// The keeper embeds this backend and holds every persistent process for
// its whole life, so a per-process thread or buffer is paid N times.

// liveCost is the host's growth while n processes sleep.
type liveCost struct {
	threads, fds float64 // per process
	goroutines   float64 // per process
	// Per process: VmRSS, and the Go heap and goroutine stacks in use.
	rssKiB, heapKiB, stackKiB float64
}

// selfStatus reads one "Key: value" line of /proc/self/status as a number
// (the first field: VmRSS is in kB).
func selfStatus(t testing.TB, key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// fdKinds counts this process's descriptors by what they are: "pipe",
// "anon_inode:[pidfd]", a cgroup directory, ...
func fdKinds() map[string]int {
	out := map[string]int{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		kind, _, _ := strings.Cut(l, ":[")
		if strings.HasPrefix(l, "anon_inode:") {
			kind = l
		} else if strings.HasPrefix(l, "/sys/fs/cgroup") {
			kind = "cgroup dir"
		} else if strings.HasPrefix(l, "/") {
			kind = "file"
		}
		out[kind]++
	}
	return out
}

// hostSample is the host's footprint at one moment, after a GC.
type hostSample struct {
	threads, fds, rssKiB, heap, stack int64
	goroutines                        int64
	fdKinds                           map[string]int
}

func sampleHost(t testing.TB) hostSample {
	// Collect (twice: a sync.Pool's victim cache survives one cycle) and
	// return freed pages, so VmRSS counts what is live, not garbage the
	// sampling itself (or a spawn) left behind.
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return hostSample{
		threads:    selfStatus(t, "Threads"),
		goroutines: int64(runtime.NumGoroutine()),
		fds:        int64(openFDs(t)),
		fdKinds:    fdKinds(),
		rssKiB:     selfStatus(t, "VmRSS"),
		heap:       int64(ms.HeapInuse),
		stack:      int64(ms.StackInuse),
	}
}

// settleBlocked polls (bounded) until at least n settle goroutines exist
// and none of them is running or runnable: each is parked wherever the
// backend waits for its root's exit. Only then does a thread count say
// what a waiting process costs (a blocking wait shows as "syscall", and
// each such goroutine holds its own OS thread).
func settleBlocked(t testing.TB, n int) {
	deadline := time.Now().Add(30 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		for {
			k := runtime.Stack(buf, true)
			if k < len(buf) {
				buf = buf[:k]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		total, busy := 0, 0
		for _, g := range strings.Split(string(buf), "\n\n") {
			if !strings.Contains(g, "local.(*proc).run(") {
				continue
			}
			total++
			if strings.Contains(g, " [running]") || strings.Contains(g, " [runnable]") {
				busy++
			}
		}
		if total >= n && busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("settle goroutines: %d (want >= %d), %d not blocked", total, n, busy)
		}
		buf = buf[:cap(buf)]
		time.Sleep(10 * time.Millisecond)
	}
}

// measureLive starts n `sleep 1000` processes, measures the host's growth
// once they all wait, then kills and cleans them up (also on failure).
func measureLive(t testing.TB, n int, opts local.Options) liveCost {
	be, err := local.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := sandbox.ProcessSpec{
		Argv:   []string{"/bin/sleep", "1000"},
		Cwd:    t.TempDir(),
		Env:    []string{"PATH=/usr/bin:/bin"},
		Stdin:  sandbox.StdinSpec{Mode: sandbox.StdinClosed},
		Output: sandbox.OutputSpec{RingBytes: 64 << 10, SpillBytes: 1 << 20, Overflow: sandbox.DropOldest, SpillDir: t.TempDir()},
		Grace:  time.Second,
		Drain:  time.Second,
	}
	// Warm up once: reaper, cgroup pool, buffer pools.
	warm := spec
	warm.Argv = []string{"/bin/true"}
	h, err := be.Start(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	h.Wait(ctx)
	be.Cleanup(ctx, h.Ref())
	before := sampleHost(t)
	var hs []sandbox.Handle
	defer func() {
		for _, h := range hs {
			h.Terminate(ctx, sandbox.Force)
			be.Cleanup(ctx, h.Ref())
		}
	}()
	for i := 0; i < n; i++ {
		h, err := be.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if !opts.Multiplex {
		settleBlocked(t, n) // multiplexed, nothing waits per process
	}
	// Read every process's figures, as a list of them does: a read must
	// leave nothing held per process (it left the group's cpu.stat open).
	for _, h := range hs {
		h.Stats()
	}
	after := sampleHost(t)
	per := func(a, b int64) float64 { return float64(a-b) / float64(n) }
	for k, v := range after.fdKinds {
		if d := v - before.fdKinds[k]; d != 0 {
			t.Logf("fds %-22s %+.2f/process", k, float64(d)/float64(n))
		}
	}
	return liveCost{
		threads:    per(after.threads, before.threads),
		goroutines: per(after.goroutines, before.goroutines),
		fds:        per(after.fds, before.fds),
		rssKiB:     per(after.rssKiB, before.rssKiB),
		heapKiB:    per(after.heap, before.heap) / 1024,
		stackKiB:   per(after.stack, before.stack) / 1024,
	}
}

// A live process must not cost an OS thread: waiting for its exit and
// for its output parks goroutines in the runtime's poller. Counted once
// every settle goroutine is blocked, so CPU load cannot fake a pass (a
// blocking waitid per process would show as 50 more threads).
func TestLiveProcessCostsNoThread(t *testing.T) {
	const n = 50
	before := selfStatus(t, "Threads")
	c := measureLive(t, n, local.Options{})
	grew := c.threads * n
	t.Logf("%d live processes: threads %+.0f (from %d), fds %.1f, RSS %.1f KiB, heap %.1f KiB per process", n, grew, before, c.fds, c.rssKiB, c.heapKiB)
	if grew >= 10 {
		t.Errorf("%d live processes grew the host by %.0f OS threads, want < 10", n, grew)
	}
	// A quiet pump borrows no buffer (it used to hold 128 KiB per stream).
	if c.heapKiB >= 64 {
		t.Errorf("a live quiet process holds %.0f KiB of Go heap, want < 64 (no pump buffers)", c.heapKiB)
	}
}

// Multiplexed (the keeper's mode), a live process costs its two pipe
// descriptors and nothing else that grows with the count: no pidfd, no
// goroutine (the pumps are one loop, the exit one SIGCHLD watcher, the
// settle goroutine starts at the exit), no thread.
func TestMultiplexedProcessCostsPipesOnly(t *testing.T) {
	const n = 50
	c := measureLive(t, n, local.Options{Multiplex: true})
	t.Logf("%d live processes: goroutines %.2f, threads %.2f, fds %.2f, RSS %.1f KiB, heap %.1f KiB per process", n, c.goroutines, c.threads, c.fds, c.rssKiB, c.heapKiB)
	if c.fds > 2 {
		t.Errorf("%.2f descriptors per live process, want 2 (the output pipes; no pidfd)", c.fds)
	}
	if grew := c.goroutines * n; grew >= 5 {
		t.Errorf("%d live processes grew the host by %.0f goroutines, want < 5", n, grew)
	}
	if grew := c.threads * n; grew >= 10 {
		t.Errorf("%d live processes grew the host by %.0f OS threads, want < 10", n, grew)
	}
}

// BenchmarkLiveCost reports what one live `sleep` costs the host, over
// 200 of them at once (run with -benchtime 1x: one round is the sample).
//
//	go test -run '^$' -bench LiveCost -benchtime 1x ./sandbox/local/
func BenchmarkLiveCost(b *testing.B) {
	const n = 200
	for _, mode := range []struct {
		name string
		opts local.Options
	}{{"pidfd", local.Options{}}, {"multiplex", local.Options{Multiplex: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			var c liveCost
			for i := 0; i < b.N; i++ {
				c = measureLive(b, n, mode.opts)
			}
			reportLive(b, c)
		})
	}
}

func reportLive(b *testing.B, c liveCost) {
	b.ReportMetric(c.goroutines, "goroutines/proc")
	b.ReportMetric(c.threads, "threads/proc")
	b.ReportMetric(c.rssKiB, "rss-KiB/proc")
	b.ReportMetric(c.heapKiB, "heap-KiB/proc")
	b.ReportMetric(c.stackKiB, "stack-KiB/proc")
	b.ReportMetric(c.fds, "fds/proc")
}

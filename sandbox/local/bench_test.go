package local_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// BenchmarkSpawnWait spawns and waits /bin/true through the local backend
// and through bare os/exec, alternating in the same loop so both see the
// same machine load, and reports the ratio (goal <= 1.25).
//
//	go test -run '^$' -bench SpawnWait -benchtime 400x ./sandbox/local/
func BenchmarkSpawnWait(b *testing.B) {
	b.Run("cgroup", func(b *testing.B) { benchSpawnWait(b, local.Options{}) })
	// Without cgroups: what the tracking cgroup costs.
	b.Run("nocgroup", func(b *testing.B) { benchSpawnWait(b, local.Options{NoCgroups: true}) })
	// The keeper's mode (one epoll loop, the SIGCHLD watcher): the backend
	// under every persistent process.
	b.Run("multiplex", func(b *testing.B) { benchSpawnWait(b, local.Options{Multiplex: true}) })
}

func benchSpawnWait(b *testing.B, opts local.Options) {
	be, err := local.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	spill := b.TempDir()
	cwd := b.TempDir()
	spec := sandbox.ProcessSpec{
		Argv:   []string{"/bin/true"},
		Cwd:    cwd,
		Env:    []string{"PATH=/usr/bin:/bin"},
		Stdin:  sandbox.StdinSpec{Mode: sandbox.StdinClosed},
		Output: sandbox.OutputSpec{RingBytes: 64 << 10, SpillBytes: 1 << 20, Overflow: sandbox.DropOldest, SpillDir: spill},
		Grace:  time.Second,
		Drain:  time.Second,
	}
	ctx := context.Background()
	var tLocal, tExec time.Duration
	var sLocal, sExec, sStart []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		h, err := be.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		sStart = append(sStart, time.Since(t0))
		if _, err := h.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		tLocal += time.Since(t0)
		sLocal = append(sLocal, time.Since(t0))
		if err := be.Cleanup(ctx, h.Ref()); err != nil {
			b.Fatal(err)
		}

		t0 = time.Now()
		// The same work os/exec users do: pipes for stdout and stderr.
		cmd := exec.Command("/bin/true")
		cmd.Dir, cmd.Env = cwd, spec.Env
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		tExec += time.Since(t0)
		sExec = append(sExec, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64(tLocal.Microseconds())/float64(b.N), "local-µs/op")
	b.ReportMetric(float64(tExec.Microseconds())/float64(b.N), "osexec-µs/op")
	b.ReportMetric(float64(tLocal)/float64(tExec), "local/osexec")
	// Medians resist the noise of a shared machine better than means.
	b.ReportMetric(float64(median(sLocal))/float64(median(sExec)), "p50-local/osexec")
	b.ReportMetric(float64(median(sStart).Microseconds()), "p50-start-µs")
	if os.Getenv("BENCH_TAILS") != "" {
		for _, x := range []struct {
			n string
			d []time.Duration
		}{{"start", sStart}, {"local", sLocal}, {"exec", sExec}} {
			s := append([]time.Duration(nil), x.d...)
			sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
			b.Logf("%s p50 %v p90 %v p99 %v max %v", x.n, s[len(s)/2], s[len(s)*9/10], s[len(s)*99/100], s[len(s)-1])
		}
	}
	b.ReportMetric(float64(median(sExec).Microseconds()), "p50-osexec-µs")
	// Median and IQR per side, for docs/bench.md's anchor table.
	testutil.ReportSide(b, "local", "µs", sLocal)
	testutil.ReportSide(b, "osexec", "µs", sExec)
}

// BenchmarkCapture1GiB streams 1 GiB of stdout through the local backend
// (ring 1 MiB, 64 MiB spill) and, alternating, reads the same stream raw
// from an os/exec pipe into io.Discard. Reports both throughputs and the
// ratio (goal >= 0.5).
//
//	go test -run '^$' -bench Capture1GiB -benchtime 3x ./sandbox/local/
func BenchmarkCapture1GiB(b *testing.B) {
	const total = 1 << 30
	be, err := local.New(local.Options{})
	if err != nil {
		b.Fatal(err)
	}
	spill := b.TempDir()
	cwd := b.TempDir()
	script := "head -c " + strconv.Itoa(total) + " /dev/zero"
	spec := sandbox.ProcessSpec{
		Argv:   []string{"/bin/sh", "-c", "exec " + script},
		Cwd:    cwd,
		Env:    []string{"PATH=/usr/bin:/bin"},
		Stdin:  sandbox.StdinSpec{Mode: sandbox.StdinClosed},
		Output: sandbox.OutputSpec{RingBytes: 1 << 20, SpillBytes: 64 << 20, Overflow: sandbox.DropOldest, SpillDir: spill},
		Grace:  time.Second,
		Drain:  time.Second,
	}
	ctx := context.Background()
	var tLocal, tRaw time.Duration
	var sLocal, sRaw []time.Duration
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		h, err := be.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		tLocal += time.Since(t0)
		sLocal = append(sLocal, time.Since(t0))
		if h.Stdout().End() != total {
			b.Fatalf("captured %d bytes", h.Stdout().End())
		}
		be.Cleanup(ctx, h.Ref())

		t0 = time.Now()
		cmd := exec.Command("/bin/sh", "-c", "exec "+script)
		cmd.Dir, cmd.Env = cwd, spec.Env
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stdout = w
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		w.Close()
		n, err := io.CopyBuffer(io.Discard, onlyReader{r}, make([]byte, 128<<10))
		r.Close()
		cmd.Wait()
		tRaw += time.Since(t0)
		sRaw = append(sRaw, time.Since(t0))
		if n != total || err != nil {
			b.Fatalf("raw read %d %v", n, err)
		}
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(total) * float64(b.N) / d.Seconds() / (1 << 20) }
	b.ReportMetric(mbps(tLocal), "local-MiB/s")
	b.ReportMetric(mbps(tRaw), "raw-MiB/s")
	b.ReportMetric(float64(tRaw)/float64(tLocal), "local/raw")
	// Time per GiB, median and IQR per side (the anchor table's ratio is
	// raw/local: the capture's share of the raw throughput).
	testutil.ReportSide(b, "local", "ms", sLocal)
	testutil.ReportSide(b, "raw", "ms", sRaw)
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// onlyReader hides WriterTo so io.CopyBuffer really uses the buffer.
type onlyReader struct{ io.Reader }

// BenchmarkExecHelper is what a limit that needs the exec helper costs a
// spawn (helper.go): Start and Wait of /bin/true with an open-files
// limit through the C helper (the binary's constructor, before the Go
// runtime) and through the Go helper (a full start of the binary), and
// with no limit (a direct exec), interleaved. helper-c-ms/direct-ms is
// what every limited persistent process pays over a direct exec.
//
//	go test -run '^$' -bench ExecHelper -benchtime 50x ./sandbox/local/
func BenchmarkExecHelper(b *testing.B) {
	be, err := local.New(local.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := func(openFiles int, goHelper bool) func() error {
		return func() error {
			local.SetGoHelper(goHelper)
			defer local.SetGoHelper(false)
			spec := sandbox.ProcessSpec{Argv: []string{"/bin/true"}, Cwd: "/", Env: []string{"PATH=/usr/bin:/bin"}, Stdin: sandbox.StdinSpec{Mode: sandbox.StdinClosed},
				Output: sandbox.OutputSpec{RingBytes: 4 << 10, Overflow: sandbox.DropOldest}, Grace: time.Second, Drain: time.Second}
			spec.Limits.OpenFiles = openFiles
			h, err := be.Start(ctx, spec)
			if err != nil {
				return err
			}
			if _, err := h.Wait(ctx); err != nil {
				return err
			}
			return be.Cleanup(ctx, h.Ref())
		}
	}
	sides := []testutil.Side{{Name: "direct", Run: run(0, false)}, {Name: "helper-go", Run: run(4096, true)}}
	if local.CHelper {
		sides = append(sides, testutil.Side{Name: "helper-c", Run: run(4096, false)})
	}
	med := testutil.ReportSides(b, "ms", sides, testutil.Interleave(b, sides, 5))
	if c, ok := med["helper-c"]; ok {
		b.ReportMetric(c/med["direct"], "c/direct")
		b.ReportMetric(med["helper-go"]/c, "go/c")
	}
}

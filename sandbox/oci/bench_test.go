package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox"
)

// BenchmarkStartToExit compares, in one run, the backend's start-to-exit
// time for /bin/true (Start + Wait + Cleanup: bundle, monitor, create,
// start, init, exit record, delete) with `runc run` on a bundle prepared
// once from the same profile (runc run also creates, starts, waits and
// deletes). Goal: oci/runc-run <= 1.15.
//
//	go test ./sandbox/oci -run '^$' -bench StartToExit -benchtime 50x -count 3
func BenchmarkStartToExit(b *testing.B) {
	e := newEnv(b, nil)
	ctx := context.Background()
	spec := e.spec("/bin/true")
	run := func(b *testing.B, be *Backend, timeCleanup bool) {
		for i := 0; i < b.N; i++ {
			h, err := be.Start(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			if ex, err := h.Wait(ctx); err != nil || ex.Code != 0 {
				b.Fatalf("%+v %v", ex, err)
			}
			if !timeCleanup {
				b.StopTimer()
			}
			if err := be.Cleanup(ctx, h.Ref()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	// Start-to-exit: Start until Wait returns (the runtime's delete runs
	// in the monitor meanwhile, untimed here, timed in +cleanup).
	b.Run("oci", func(b *testing.B) { run(b, e.b, false) })
	b.Run("oci+cleanup", func(b *testing.B) { run(b, e.b, true) })
	b.Run("oci-no-init", func(b *testing.B) {
		opts := e.opts
		opts.Init, opts.NoInit = "", true
		nb, err := New(opts)
		if err != nil {
			b.Fatal(err)
		}
		run(b, nb, false)
	})
	b.Run("runc-run", func(b *testing.B) {
		prof := e.opts.Profiles["default"]
		lim, _ := sandbox.CheckProfile(e.b.policy.Profiles, "default", spec.Limits, false)
		bundle := filepath.Join(e.opts.Root, "bench-bundle")
		os.MkdirAll(bundle, 0o700)
		cfg, err := buildSpec(specInput{profile: prof, proc: spec, limits: lim, cgroup: "capsule-oci/bench", swap: e.b.swap})
		if err != nil {
			b.Fatal(err)
		}
		if err := writeJSONAtomic(filepath.Join(bundle, "config.json"), cfg); err != nil {
			b.Fatal(err)
		}
		root := filepath.Join(e.opts.Root, "bench-runc")
		runc, _ := exec.LookPath("runc")
		for i := 0; i < b.N; i++ {
			cmd := exec.Command(runc, "--root", root, "run", "--bundle", bundle, fmt.Sprintf("bench-%d", i))
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("runc run: %v: %s", err, out)
			}
		}
	})
}

var _ = sandbox.Exit{}
var _ = time.Second

// BenchmarkStartToExitRatio interleaves the two measurements of
// BenchmarkStartToExit in every iteration, so that the load of a shared
// machine drifts equally on both, and reports their ratio; ratio-cold is
// the same start with the monitor started on demand instead of taken from
// the spare (see spare.go).
//
//	go test ./sandbox/oci -run '^$' -bench StartToExitRatio -benchtime 50x -count 3
func BenchmarkStartToExitRatio(b *testing.B) {
	e := newEnv(b, nil)
	ctx := context.Background()
	spec := e.spec("/bin/true")
	prof := e.opts.Profiles["default"]
	lim, _ := sandbox.CheckProfile(e.b.policy.Profiles, "default", spec.Limits, false)
	bundle := filepath.Join(e.opts.Root, "bench-bundle")
	os.MkdirAll(bundle, 0o700)
	cfg, err := buildSpec(specInput{profile: prof, proc: spec, limits: lim, cgroup: "capsule-oci/bench", swap: e.b.swap})
	if err != nil {
		b.Fatal(err)
	}
	if err := writeJSONAtomic(filepath.Join(bundle, "config.json"), cfg); err != nil {
		b.Fatal(err)
	}
	root := filepath.Join(e.opts.Root, "bench-runc")
	runc, _ := exec.LookPath("runc")
	var ociT, coldT, runcT time.Duration
	var sOCI, sRunc []time.Duration
	oci := func(cold bool) time.Duration {
		spare.Lock()
		spare.off = cold
		spare.Unlock()
		defer func() {
			spare.Lock()
			spare.off = false
			spare.Unlock()
		}()
		t0 := time.Now()
		h, err := e.b.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if ex, err := h.Wait(ctx); err != nil || ex.Code != 0 {
			b.Fatalf("%+v %v", ex, err)
		}
		d := time.Since(t0)
		if err := e.b.Cleanup(ctx, h.Ref()); err != nil {
			b.Fatal(err)
		}
		return d
	}
	// The spare's refill runs while the start that took the spare runs
	// (timed there, as in production); let it finish before timing
	// anything else, so that it never slows the other measurements.
	waitSpare := func() {
		for {
			spare.Lock()
			f := spare.filling
			spare.Unlock()
			if !f {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := oci(false)
		ociT += d
		sOCI = append(sOCI, d)
		waitSpare()
		// The same start with a monitor started on demand (no spare),
		// as before the spare existed: what the spare saves.
		coldT += oci(true)
		waitSpare()
		t0 := time.Now()
		cmd := exec.Command(runc, "--root", root, "run", "--bundle", bundle, fmt.Sprintf("bench-%d", i))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("runc run: %v: %s", err, out)
		}
		runcT += time.Since(t0)
		sRunc = append(sRunc, time.Since(t0))
	}
	testutil.ReportSide(b, "oci", "ms", sOCI)
	testutil.ReportSide(b, "runc-run", "ms", sRunc)
	b.ReportMetric(float64(ociT.Microseconds())/float64(b.N)/1000, "oci-ms/op")
	b.ReportMetric(float64(runcT.Microseconds())/float64(b.N)/1000, "runc-run-ms/op")
	b.ReportMetric(float64(ociT)/float64(runcT), "ratio")
	b.ReportMetric(float64(coldT.Microseconds())/float64(b.N)/1000, "oci-cold-ms/op")
	b.ReportMetric(float64(coldT)/float64(runcT), "ratio-cold")
}

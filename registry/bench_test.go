package registry

import (
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// go test -run '^$' -bench . -benchtime 2s ./registry/

// BenchmarkStatus is one owner status call on a live process.
func BenchmarkStatus(b *testing.B) {
	e := newEnv(b, nil)
	ctx := as("cap", "alice")
	id, err := e.r.SpawnPersistent(ctx, e.sh("sleep 100"), PersistOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.r.Status(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAttachStatus is what a fresh instance does to re-find its
// process: attach by ID, status, drop the handle.
func BenchmarkAttachStatus(b *testing.B) {
	e := newEnv(b, nil)
	ctx := as("cap", "alice")
	id, err := e.r.SpawnPersistent(ctx, e.sh("sleep 100"), PersistOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		h, err := e.r.Attach(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.r.Status(ctx, id); err != nil {
			b.Fatal(err)
		}
		h.Drop(ctx)
	}
}

// BenchmarkStatusNoSuchProcess: the cost of a miss (malformed ID), to
// compare with BenchmarkStatusForeign (a real ID of another principal).
func BenchmarkStatusNoSuchProcess(b *testing.B) {
	e := newEnv(b, nil)
	ctx := as("cap", "alice")
	b.ResetTimer()
	for b.Loop() {
		e.r.Status(ctx, "malformed")
	}
}

func BenchmarkStatusForeign(b *testing.B) {
	e := newEnv(b, nil)
	id, err := e.r.SpawnPersistent(as("cap", "alice"), e.sh("sleep 100"), PersistOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := as("cap", "bob")
	b.ResetTimer()
	for b.Loop() {
		e.r.Status(ctx, id)
	}
}

const benchLog = 8 << 20

// BenchmarkReadSince64K: read-since throughput through the registry in
// 64 KiB chunks over an 8 MiB retained log (ring), cursor tokens included.
func BenchmarkReadSince64K(b *testing.B) {
	e := newEnv(b, nil)
	ctx := as("cap", "alice")
	id, err := e.r.SpawnPersistent(ctx, e.sh("head -c 8388608 /dev/zero"), PersistOptions{LogRingBytes: ptr(uint32(benchLog))})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.r.Wait(ctx, id, 20*time.Second); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(64 << 10)
	b.ResetTimer()
	var cur *string
	for b.Loop() {
		c, err := e.r.ReadSince(ctx, id, Stdout, cur, 64<<10)
		if err != nil {
			b.Fatal(err)
		}
		cur = &c.Next
		if c.EOF {
			cur = nil
		}
	}
}

// BenchmarkReadFromRaw64K is the same reads straight from the seam's
// OutputLog: the registry's overhead is the ratio of the two.
func BenchmarkReadFromRaw64K(b *testing.B) {
	l, err := sandbox.NewOutputLog(sandbox.OutputLogConfig{RingBytes: benchLog, Overflow: sandbox.DropOldest})
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for range benchLog / len(chunk) {
		l.Write(chunk)
	}
	l.CloseWrite()
	b.SetBytes(64 << 10)
	b.ResetTimer()
	var off int64
	for b.Loop() {
		c, err := l.ReadFrom(off, 64<<10)
		if err != nil {
			b.Fatal(err)
		}
		off = c.Next
		if c.EOF {
			off = 0
		}
	}
}

// BenchmarkReadSinceVsRaw interleaves one registry read-since and one raw
// seam ReadFrom per iteration (64 KiB each, same 8 MiB content), so both
// see the same machine noise; it reports each side's MB/s and their ratio.
func BenchmarkReadSinceVsRaw(b *testing.B) {
	e := newEnv(b, nil)
	ctx := as("cap", "alice")
	id, err := e.r.SpawnPersistent(ctx, e.sh("head -c 8388608 /dev/zero"), PersistOptions{LogRingBytes: ptr(uint32(benchLog))})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.r.Wait(ctx, id, 20*time.Second); err != nil {
		b.Fatal(err)
	}
	l, err := sandbox.NewOutputLog(sandbox.OutputLogConfig{RingBytes: benchLog, Overflow: sandbox.DropOldest})
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for range benchLog / len(chunk) {
		l.Write(chunk)
	}
	l.CloseWrite()
	var reg, raw time.Duration
	var cur *string
	var off int64
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		c, err := e.r.ReadSince(ctx, id, Stdout, cur, 64<<10)
		t1 := time.Now()
		rc, rerr := l.ReadFrom(off, 64<<10)
		t2 := time.Now()
		if err != nil || rerr != nil {
			b.Fatal(err, rerr)
		}
		reg += t1.Sub(t0)
		raw += t2.Sub(t1)
		cur, off = &c.Next, rc.Next
		if c.EOF {
			cur = nil
		}
		if rc.EOF {
			off = 0
		}
	}
	mb := float64(b.N) * 64 * 1024 / 1e6
	b.ReportMetric(mb/reg.Seconds(), "readsince-MB/s")
	b.ReportMetric(mb/raw.Seconds(), "raw-MB/s")
	b.ReportMetric(raw.Seconds()/reg.Seconds(), "ratio")
}

// BenchmarkKeyOf is the ID → map key hash of every call naming a
// process (goal: no allocation; run with -benchmem).
func BenchmarkKeyOf(b *testing.B) {
	e := newEnv(b, nil)
	id, _ := newRawID()
	b.ReportAllocs()
	for b.Loop() {
		e.r.keyOf(id)
	}
}

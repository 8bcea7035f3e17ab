package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

func newLog(t testing.TB, ring int, spill int64, ov Overflow) *OutputLog {
	t.Helper()
	cfg := OutputLogConfig{RingBytes: ring, SpillBytes: spill, Overflow: ov}
	if spill > 0 {
		d, err := NewSpillDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Spill, cfg.SpillName = d, "out.log"
	}
	l, err := NewOutputLog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Remove() })
	return l
}

// stream is the deterministic test stream: byte i is i mod 251.
func stream(from, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((from + int64(i)) % 251)
	}
	return b
}

func TestOutputLogReadFrom(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ring        int
		spill       int64
		total       int64
		chunk       int64
		off         int64
		wantDropped int64
	}{
		{"in ring", 100, 0, 80, 7, 10, 0},
		{"ring only, slid out", 100, 0, 1000, 7, 10, 890},
		{"from spill", 100, 1000, 900, 13, 0, 0},
		{"beyond spill cap", 100, 500, 2000, 13, 0, 1500},
		{"single chunk larger than both", 100, 500, 2000, 2000, 0, 1500},
		{"exactly at the cap", 100, 500, 500, 50, 0, 0},
		{"ring not block aligned", 70001, 0, 300000, 65536, 229999, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLog(t, tc.ring, tc.spill, DropOldest)
			for off := int64(0); off < tc.total; off += tc.chunk {
				n := min(tc.chunk, tc.total-off)
				if _, err := l.Write(stream(off, n)); err != nil {
					t.Fatal(err)
				}
			}
			l.CloseWrite()
			var got []byte
			off, dropped := tc.off, int64(0)
			for {
				c, err := l.ReadFrom(off, 37)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) > 0 && c.Dropped > 0 {
					t.Fatalf("drop in the middle of a read at %d", off)
				}
				dropped += c.Dropped
				got = append(got, c.Data...)
				off = c.Next
				if c.EOF {
					break
				}
			}
			if dropped != tc.wantDropped {
				t.Fatalf("dropped %d, want %d", dropped, tc.wantDropped)
			}
			if want := stream(tc.off+dropped, tc.total-tc.off-dropped); !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, not the stream's %d", len(got), len(want))
			}
			if l.Dropped() != max(0, tc.total-max(int64(tc.ring), tc.spill)) {
				t.Fatalf("Dropped() = %d", l.Dropped())
			}
		})
	}
}

func TestOutputLogBadOffset(t *testing.T) {
	l := newLog(t, 10, 0, DropOldest)
	l.Write([]byte("abc"))
	for _, off := range []int64{-1, 4} {
		if _, err := l.ReadFrom(off, 10); !errors.Is(err, ErrBadOffset) {
			t.Fatalf("ReadFrom(%d): %v", off, err)
		}
	}
	c, err := l.ReadFrom(3, 10)
	if err != nil || len(c.Data) != 0 || c.Next != 3 || c.EOF {
		t.Fatalf("ReadFrom(end) = %+v, %v", c, err)
	}
}

func TestOutputLogDrainAndReadersIndependent(t *testing.T) {
	l := newLog(t, 64, 0, DropOldest)
	l.Write([]byte("hello world"))
	c, _ := l.Drain(5)
	if string(c.Data) != "hello" || l.DrainCursor() != 5 {
		t.Fatalf("Drain = %q cursor %d", c.Data, l.DrainCursor())
	}
	// A non-draining reader still sees everything.
	r, _ := l.ReadFrom(0, 100)
	if string(r.Data) != "hello world" {
		t.Fatalf("ReadFrom after Drain = %q", r.Data)
	}
	c, _ = l.Drain(100)
	if string(c.Data) != " world" || c.EOF {
		t.Fatalf("Drain = %+v", c)
	}
	l.CloseWrite()
	c, _ = l.Drain(100)
	if len(c.Data) != 0 || !c.EOF {
		t.Fatalf("Drain at EOF = %+v", c)
	}
}

func TestOutputLogChanged(t *testing.T) {
	l := newLog(t, 64, 0, DropOldest)
	ch := l.Changed()
	select {
	case <-ch:
		t.Fatal("changed before a write")
	default:
	}
	l.Write([]byte("x"))
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("not notified")
	}
	l.CloseWrite()
	select {
	case <-l.Changed():
	default:
		t.Fatal("Changed of a closed log must be closed")
	}
}

func TestOutputLogBackpressure(t *testing.T) {
	l := newLog(t, 10, 0, Backpressure)
	if room := l.WaitSpace(nil); room != 10 {
		t.Fatalf("room %d", room)
	}
	l.Write(make([]byte, 10))
	stop := make(chan struct{})
	got := make(chan int64)
	go func() { got <- l.WaitSpace(stop) }()
	select {
	case r := <-got:
		t.Fatalf("WaitSpace returned %d with a full ring", r)
	case <-time.After(50 * time.Millisecond):
	}
	l.Ack(4)
	if r := <-got; r != 4 {
		t.Fatalf("room after Ack(4) = %d", r)
	}
	// Drain cursor counts as acknowledgement too.
	l.Write(make([]byte, 4))
	go func() { got <- l.WaitSpace(stop) }()
	time.Sleep(20 * time.Millisecond)
	l.Drain(7) // drops 4 (slid out of the ring), reads 7: cursor 11
	if r := <-got; r != 7 {
		t.Fatalf("room after Drain(7) = %d", r)
	}
	l.Write(make([]byte, 7))
	go func() { got <- l.WaitSpace(stop) }()
	close(stop)
	if r := <-got; r != 0 {
		t.Fatalf("WaitSpace after stop = %d", r)
	}
	l.LiftBackpressure()
	if r := l.WaitSpace(nil); r != 10 {
		t.Fatalf("room after lift = %d", r)
	}
}

func TestSpillFileFormat(t *testing.T) {
	l := newLog(t, 8, 16, DropOldest)
	l.Write(stream(0, 20))
	l.CloseWrite()
	b, err := os.ReadFile(l.SpillPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != spillHeaderSize+16 || string(b[:8]) != spillMagic {
		t.Fatalf("spill file %d bytes, magic %q", len(b), b[:8])
	}
	le := binary.LittleEndian
	if v, fl, cp, st, en := le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:]); v != 1 || fl != spillFlagClosed || cp != 16 || st != 4 || en != 20 {
		t.Fatalf("header version %d flags %d cap %d start %d end %d", v, fl, cp, st, en)
	}
	// Byte at offset o lives at 64 + o%16.
	for o := int64(4); o < 20; o++ {
		if b[spillHeaderSize+o%16] != byte(o%251) {
			t.Fatalf("byte %d misplaced", o)
		}
	}
	st, _ := os.Stat(l.SpillPath())
	dst, _ := os.Stat(filepath.Dir(l.SpillPath()))
	if st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
		t.Fatalf("modes %v %v", st.Mode(), dst.Mode())
	}
	if err := l.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.SpillPath()); !os.IsNotExist(err) {
		t.Fatalf("spill survives Remove: %v", err)
	}
	if _, err := l.ReadFrom(0, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadFrom after Remove: %v", err)
	}
}

// A disk error is reported, never swallowed: /dev/full fails every write.
func TestSpillDiskErrorReported(t *testing.T) {
	l := newLog(t, 8, 1024, DropOldest)
	full, err := os.OpenFile("/dev/full", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("SKIPPED: /dev/full unavailable (%v); cannot simulate a full disk", err)
	}
	l.mu.Lock()
	if err := l.lazySpillLocked(); err != nil { // the spill file is made at the first write
		t.Fatal(err)
	}
	l.spill.Close()
	l.spill = full
	l.mu.Unlock()
	if _, err := l.Write(stream(0, 20)); !errors.Is(err, syscall_ENOSPC()) {
		t.Fatalf("Write on a full disk: %v, want ENOSPC", err)
	}
	if l.Err() == nil {
		t.Fatal("Err() nil after a spill failure")
	}
	c, err := l.ReadFrom(0, 100)
	if !errors.Is(err, ErrSpill) || c.Dropped != 12 || !bytes.Equal(c.Data, stream(12, 8)) {
		t.Fatalf("ReadFrom after spill failure: %+v %v", c, err)
	}
}

// A disk that fills mid-stream: what the spill took before stays
// readable, the bytes between it and the ring are counted as dropped (with
// ErrSpill), and the ring's are read: read + dropped is everything written.
func TestSpillDiskFullKeepsWhatItTook(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("SKIP: cannot mount a tmpfs to fill (%v): needs root (CI runs as root)", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	d, err := NewSpillDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewOutputLog(OutputLogConfig{RingBytes: 4096, SpillBytes: 1 << 30, Overflow: DropOldest, Spill: d, SpillName: "out.log"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Remove() })
	const total = 1 << 20 // four times the disk
	var werr error
	for off := int64(0); off < total; off += 1000 {
		if _, err := l.Write(stream(off, min(1000, total-off))); err != nil && werr == nil {
			werr = err
		}
	}
	if !errors.Is(werr, syscall_ENOSPC()) {
		t.Fatalf("writes on a full disk: %v, want ENOSPC", werr)
	}
	var read, dropped int64
	var spillErrs int
	for off := int64(0); off < total; {
		c, err := l.ReadFrom(off, 64<<10)
		if err != nil {
			if !errors.Is(err, ErrSpill) {
				t.Fatalf("read at %d: %v", off, err)
			}
			spillErrs++
		}
		if !bytes.Equal(c.Data, stream(off+c.Dropped, int64(len(c.Data)))) {
			t.Fatalf("read at %d: data is not the stream's bytes at %d", off, off+c.Dropped)
		}
		read, dropped, off = read+int64(len(c.Data)), dropped+c.Dropped, c.Next
	}
	if read+dropped != total || spillErrs != 1 {
		t.Fatalf("read %d + dropped %d of %d, %d reads reported the spill error; want all accounted, once", read, dropped, total, spillErrs)
	}
	if read < 128<<10 { // the disk took about 256 KiB before it filled
		t.Fatalf("only %d bytes readable: what the spill took before the disk filled was thrown away", read)
	}
}

func TestOutputLogConcurrentReaders(t *testing.T) {
	l := newLog(t, 1000, 10000, DropOldest)
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var off int64
			for {
				<-l.Changed()
				c, err := l.ReadFrom(off, 333)
				if err != nil {
					t.Error(err)
					return
				}
				if c.Dropped == 0 && !bytes.Equal(c.Data, stream(off, int64(len(c.Data)))) {
					t.Error("wrong bytes")
					return
				}
				off = c.Next
				if c.EOF {
					return
				}
			}
		}()
	}
	for off := int64(0); off < 50000; off += 77 {
		l.Write(stream(off, 77))
	}
	l.CloseWrite()
	wg.Wait()
}

func TestStdinWriteAndCancel(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := NewStdin(w, []byte("pre:"))
	go func() { s.Write(context.Background(), []byte("after")) }()
	buf := make([]byte, 9)
	if _, err := ioReadFull(r, buf); err != nil || string(buf) != "pre:after" {
		t.Fatalf("read %q %v: prelude first, then writes", buf, err)
	}
	// Nobody reads: the write must end with the ctx, torn, and close.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	n, err := s.Write(ctx, make([]byte, 1<<20))
	if !errors.Is(err, context.DeadlineExceeded) || n == 0 || n == 1<<20 {
		t.Fatalf("blocked write: n=%d err=%v", n, err)
	}
	if !s.IsClosed() {
		t.Fatal("torn write did not close stdin")
	}
	if _, err := s.Write(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if s.Close() != nil || s.Close() != nil {
		t.Fatal("Close not idempotent")
	}
}

func TestStdinBrokenPipe(t *testing.T) {
	r, w, _ := os.Pipe()
	r.Close()
	s := NewStdin(w, nil)
	if _, err := s.Write(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write to a closed reader: %v, want ErrClosed", err)
	}
}

func TestStdinCloseWakesWriter(t *testing.T) {
	r, w, _ := os.Pipe()
	defer r.Close()
	s := NewStdin(w, nil)
	done := make(chan error)
	go func() {
		_, err := s.Write(context.Background(), make([]byte, 1<<20))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked write after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the writer")
	}
}

func TestOpenOutputLog(t *testing.T) {
	l := newLog(t, 8, 64, DropOldest)
	l.Write(stream(0, 100))
	l.CloseWrite()
	r, err := OpenOutputLog(l.SpillPath())
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.ReadFrom(0, 1000)
	if err != nil || c.Dropped != 36 || !bytes.Equal(c.Data, stream(36, 64)) || !c.EOF || c.Next != 100 {
		t.Fatalf("reopened read: %+v %v", c, err)
	}
	if r.End() != 100 || !r.Closed() {
		t.Fatalf("reopened end %d closed %v", r.End(), r.Closed())
	}
	// A corrupt header is refused, never trusted.
	f, _ := os.OpenFile(l.SpillPath(), os.O_RDWR, 0)
	f.WriteAt([]byte("XXXX"), 0)
	f.Close()
	if _, err := OpenOutputLog(l.SpillPath()); !errors.Is(err, ErrSpill) {
		t.Fatalf("corrupt header: %v", err)
	}
}

// TestOpenOutputLogWhileWriting reopens the spill file of a stream that
// is still being written (a host that died mid-stream): the data region
// has wrapped past what the last header recorded, and the reader must
// get the right bytes or a drop count, never newer bytes in old slots.
func TestOpenOutputLogWhileWriting(t *testing.T) {
	const spill = headerEvery
	for _, tc := range []struct {
		name   string
		chunks []int64
	}{
		{"header then a small wrap", []int64{headerEvery, 1000}},
		{"pump-sized writes", []int64{64 << 10, 64 << 10, 64 << 10, 512 << 10, 300 << 10, 128 << 10, 100}},
		{"one write larger than the headroom", []int64{100, 2 * headerEvery}},
		{"many small writes", func() []int64 {
			var c []int64
			for i := 0; i < 300; i++ {
				c = append(c, 4096+int64(i))
			}
			return c
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLog(t, 4096, spill, DropOldest)
			var end int64
			for _, n := range tc.chunks {
				l.Write(stream(end, n))
				end += n
			}
			// No CloseWrite: the writer "crashed".
			r, err := OpenOutputLog(l.SpillPath())
			if err != nil {
				t.Fatal(err)
			}
			defer r.spill.Close()
			c, err := r.ReadFrom(0, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			from := c.Next - int64(len(c.Data))
			if from != c.Dropped || c.Next > end {
				t.Fatalf("chunk covers [%d, %d) after %d dropped, stream end %d", from, c.Next, c.Dropped, end)
			}
			if !bytes.Equal(c.Data, stream(from, int64(len(c.Data)))) {
				t.Fatalf("reopened log serves wrong bytes in [%d, %d)", from, c.Next)
			}
		})
	}
}

// TestStdinWriteBehindUnreadPrelude: a process that never reads stdin
// leaves a large prelude blocked; a later write must still end with its
// ctx (write-stdin is bounded so a call cannot pin an instance), write
// nothing, and leave the stream open.
func TestStdinWriteBehindUnreadPrelude(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := NewStdin(w, make([]byte, 1<<20)) // far beyond a pipe buffer
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	var n int
	go func() {
		defer close(done)
		n, err = s.Write(ctx, []byte("x"))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.Close() // unblock the prelude so the test can end
		<-done
		t.Fatal("write queued behind an unread prelude ignored its ctx")
	}
	if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write behind prelude: n=%d err=%v, want 0 and DeadlineExceeded", n, err)
	}
	if s.IsClosed() {
		t.Fatal("a write that sent nothing closed stdin")
	}
}

// The capture rate, step by step on a synthetic clock: a full bucket
// allows the burst, a spent one names the wait, time refills it, and a
// lifted log (the drain's final sweep) is never held.
func TestOutputRateAllowance(t *testing.T) {
	l, err := NewOutputLog(OutputLogConfig{RingBytes: 1 << 20, Overflow: DropOldest, Rate: OutputRate{BytesPerSec: 1 << 20, Burst: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if n, retry, _ := l.Allowance(now); n != 64<<10 || retry != 0 {
		t.Fatalf("full bucket: %d, retry %v; want the burst", n, retry)
	}
	l.Write(make([]byte, 64<<10))
	n, retry, space := l.Allowance(time.Now())
	if n != 0 || retry <= 0 || space != nil {
		t.Fatalf("spent bucket: %d, retry %v, space %v; want a wait", n, retry, space)
	}
	if retry > 100*time.Millisecond {
		t.Errorf("retry %v: 16 KiB at 1 MiB/s is ~16 ms", retry)
	}
	if n, _, _ := l.Allowance(time.Now().Add(time.Second)); n != 64<<10 {
		t.Errorf("a second later: %d, want the burst back", n)
	}
	if d, times := l.Throttled(); times != 1 || d <= 0 {
		t.Errorf("throttled %v, %d times: want once", d, times)
	}
	l.Write(make([]byte, 1<<20)) // a debt: a final sweep is charged
	l.LiftBackpressure()
	if n, retry, _ := l.Allowance(time.Now()); n == 0 || retry != 0 {
		t.Errorf("lifted: %d, retry %v; want no hold", n, retry)
	}
	stop := make(chan struct{})
	close(stop)
	if n := l.WaitSpace(stop); n == 0 {
		t.Error("lifted WaitSpace returned 0")
	}
}

// A rate is refused when negative, or a burst without one.
func TestOutputRateInvalid(t *testing.T) {
	for _, r := range []OutputRate{{BytesPerSec: -1}, {BytesPerSec: 1, Burst: -1}, {Burst: 10}} {
		if _, err := NewOutputLog(OutputLogConfig{RingBytes: 1, Overflow: DropOldest, Rate: r}); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%+v: %v, want ErrInvalidSpec", r, err)
		}
	}
}

// FuzzOpenOutputLog is the spill file's header parser (a later host
// trusts the file alone): any file is refused with ErrSpill or gives a
// closed log whose reads stay inside the file and end at EOF.
func FuzzOpenOutputLog(f *testing.F) {
	l := newLog(f, 64, 256, DropOldest) // f: its TempDir is removed at the end
	l.Write(stream(0, 300))
	l.CloseWrite()
	if good, err := os.ReadFile(l.SpillPath()); err == nil {
		f.Add(good)
	}
	f.Add([]byte("CAPSLOG\x00"))
	f.Add(make([]byte, spillHeaderSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "x.log")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ol, err := OpenOutputLog(p)
		if err != nil {
			if len(data) >= spillHeaderSize && !errors.Is(err, ErrSpill) {
				t.Fatalf("a full-size header refused without ErrSpill: %v", err)
			}
			return
		}
		defer ol.Remove()
		var off int64
		for i := 0; i < 64; i++ {
			c, err := ol.ReadFrom(off, 4096)
			if err != nil {
				t.Fatalf("ReadFrom(%d): %v", off, err)
			}
			if c.Next < off || c.Next > ol.End() || int64(len(c.Data)) > 4096 {
				t.Fatalf("chunk %+v from %d, end %d", c, off, ol.End())
			}
			if c.EOF {
				return
			}
			off = c.Next
		}
	})
}

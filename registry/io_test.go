package registry

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func pollAll(t *testing.T, e *env, ctx context.Context) []Event {
	t.Helper()
	b, err := e.r.PollEvents(ctx, 0, 1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b.Events
}

func lastSeq(t *testing.T, e *env, ctx context.Context) uint64 {
	t.Helper()
	b, err := e.r.PollEvents(ctx, 0, 1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b.Next
}

func exitedEvent(evs []Event, id string) (Event, bool) {
	for _, ev := range evs {
		if ev.ID == id && ev.Kind == EventExited {
			return ev, true
		}
	}
	return Event{}, false
}

func TestReadSinceCursors(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	// Byte-faithful: NUL, invalid UTF-8, a split multi-byte rune.
	payload := "abc\x00\xff\xfe\xe2\x82XYZ"
	id := e.spawn(ctx, `printf 'abc\000\377\376\342\202XYZ'; printf E >&2`, PersistOptions{})
	e.wait(ctx, id)
	c1, err := e.r.ReadSince(ctx, id, Stdout, nil, 3)
	if err != nil || string(c1.Data) != "abc" || c1.EOF {
		t.Fatalf("first: %+v %v", c1, err)
	}
	c2, err := e.r.ReadSince(ctx, id, Stdout, &c1.Next, 1<<20)
	if err != nil || string(c2.Data) != payload[3:] || !c2.EOF || c2.BytesDropped != 0 {
		t.Fatalf("second: %q %+v %v", c2.Data, c2, err)
	}
	// Non-draining: a fresh cursor sees everything again; so does status.
	c3, _ := e.r.ReadSince(ctx, id, Stdout, nil, 1<<20)
	if string(c3.Data) != payload {
		t.Fatalf("fresh: %q", c3.Data)
	}
	if c4, _ := e.r.ReadSince(ctx, id, Stderr, nil, 100); string(c4.Data) != "E" {
		t.Fatalf("stderr: %q", c4.Data)
	}
	// Foreign and forged cursors.
	other := e.spawn(ctx, "printf zzz", PersistOptions{})
	e.wait(ctx, other)
	oc, _ := e.r.ReadSince(ctx, other, Stdout, nil, 1)
	for name, tok := range map[string]string{
		"other process": oc.Next,
		"forged offset": forgeOffset(c1.Next, 0),
		"garbage":       "zzzz",
		"empty":         "",
	} {
		if _, err := e.r.ReadSince(ctx, id, Stdout, &tok, 10); err != ErrNoSuchProcess {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := e.r.ReadSince(ctx, id, Stderr, &c1.Next, 10); err != ErrNoSuchProcess {
		t.Errorf("stdout cursor on stderr: %v", err)
	}
	if _, err := e.r.ReadSince(ctx, id, Stdout, nil, 0); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("max 0: %v", err)
	}
	// read-logs drains; read-since is unaffected by the drain.
	lg, err := e.r.ReadLogs(ctx, id)
	if err != nil || string(lg.Stdout) != payload || string(lg.Stderr) != "E" || lg.Running || lg.Exit == nil {
		t.Fatalf("read-logs: %+v %v", lg, err)
	}
	if lg2, _ := e.r.ReadLogs(ctx, id); len(lg2.Stdout)+len(lg2.Stderr) != 0 {
		t.Fatalf("second drain: %+v", lg2)
	}
	if c, _ := e.r.ReadSince(ctx, id, Stdout, nil, 100); string(c.Data) != payload {
		t.Fatal("drain affected read-since")
	}
	in, _ := e.r.Status(ctx, id)
	if in.BufferedBytes == 0 || in.BytesDropped != 0 {
		t.Fatalf("info: %+v", in)
	}
}

func TestReadSinceBehindRetention(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults.SpillBytes = -1 }) // ring only
	ctx := as("cap", "alice")
	const total = 200_000
	id := e.spawn(ctx, "head -c 200000 /dev/zero", PersistOptions{LogRingBytes: ptr(uint32(4096))})
	e.wait(ctx, id)
	var got, dropped uint64
	var cur *string
	for {
		c, err := e.r.ReadSince(ctx, id, Stdout, cur, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got += uint64(len(c.Data))
		dropped += c.BytesDropped
		cur = &c.Next
		if c.EOF {
			break
		}
	}
	if dropped == 0 || got+dropped != total || got > 64<<10 {
		t.Fatalf("got %d dropped %d (total %d)", got, dropped, total)
	}
	in, _ := e.r.Status(ctx, id)
	if in.BytesDropped != dropped {
		t.Fatalf("info dropped %d, reader saw %d", in.BytesDropped, dropped)
	}
	lg, _ := e.r.ReadLogs(ctx, id)
	if lg.BytesDropped == 0 || uint64(len(lg.Stdout))+lg.BytesDropped != total {
		t.Fatalf("read-logs: %d + %d", len(lg.Stdout), lg.BytesDropped)
	}
}

func TestStdin(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults.WaitCap = 500 * time.Millisecond })
	ctx := as("cap", "alice")
	echo := e.spawn(ctx, "cat", PersistOptions{KeepStdinOpen: true})
	if n, err := e.r.WriteStdin(ctx, echo, []byte("ping\n")); err != nil || n != 5 {
		t.Fatalf("write: %d %v", n, err)
	}
	e.readUntil(ctx, echo, Stdout, "ping")
	if _, err := e.r.WriteStdin(ctx, echo, make([]byte, 1<<20+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	for range 2 {
		if err := e.r.CloseStdin(ctx, echo); err != nil {
			t.Fatalf("close-stdin not idempotent: %v", err)
		}
	}
	if ex := e.wait(ctx, echo); ex.Code == nil || *ex.Code != 0 {
		t.Fatalf("cat after EOF: %+v", ex)
	}
	if _, err := e.r.WriteStdin(ctx, echo, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	// Without keep-stdin-open there is nothing to write to.
	noin := e.spawn(ctx, "sleep 100", PersistOptions{})
	if _, err := e.r.WriteStdin(ctx, noin, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("no keep-stdin-open: %v", err)
	}
	// Torn write: a process that never reads takes one pipe buffer, then
	// the bounded write fails; the prefix length is reported and the
	// stream is closed.
	stuck := e.spawn(ctx, "sleep 100", PersistOptions{KeepStdinOpen: true})
	n, err := e.r.WriteStdin(ctx, stuck, make([]byte, 1<<20))
	var torn *TornWriteError
	if !errors.As(err, &torn) || !errors.Is(err, ErrTornWrite) || torn.Written <= 0 || torn.Written >= 1<<20 || int64(n) != torn.Written {
		t.Fatalf("torn: n=%d %v", n, err)
	}
	if in, _ := e.r.Status(ctx, stuck); in.StdinOpen {
		t.Fatal("stdin still open after a torn write")
	}
	if _, err := e.r.WriteStdin(ctx, stuck, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("after torn: %v", err)
	}
	// A bound that passes before any byte went through tears nothing.
	full := e.spawn(ctx, "sleep 100", PersistOptions{KeepStdinOpen: true})
	e.r.WriteStdin(ctx, full, make([]byte, 1<<20)) // fills the pipe (torn)
	_ = full
	for _, id := range []string{noin, stuck, full} {
		e.r.Stop(ctx, id, ptr(time.Duration(0)))
	}
}

func TestEvents(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults.EventRetention = 8 })
	ctx := as("cap", "alice")
	// log-ready, then exited.
	id := e.spawn(ctx, "read x; echo out; echo err >&2; read y", PersistOptions{KeepStdinOpen: true})
	cur := lastSeq(t, e, ctx)
	e.r.WriteStdin(ctx, id, []byte("go\n"))
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !(seen["stdout"] && seen["stderr"]) {
		b, err := e.r.PollEvents(ctx, cur, 16, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			if ev.Kind == EventLogReady && ev.ID == id {
				seen[map[Stream]string{Stdout: "stdout", Stderr: "stderr"}[ev.Stream]] = true
			}
		}
		cur = b.Next
	}
	if !seen["stdout"] || !seen["stderr"] {
		t.Fatalf("log-ready: %v", seen)
	}
	e.r.WriteStdin(ctx, id, []byte("end\n"))
	b, err := e.r.PollEvents(ctx, cur, 16, 5*time.Second)
	for err == nil && len(b.Events) > 0 && b.Events[0].Kind != EventExited {
		cur = b.Next
		b, err = e.r.PollEvents(ctx, cur, 16, 5*time.Second)
	}
	if err != nil || len(b.Events) == 0 || b.Events[0].Reason != ReasonSelfExit || *b.Events[0].Exit.Code != 0 || b.Events[0].ID != id {
		t.Fatalf("exited: %+v %v", b, err)
	}
	cur = b.Next
	// Seq is monotonic; an empty poll after the bound is not an error.
	empty, err := e.r.PollEvents(ctx, cur, 16, 10*time.Millisecond)
	if err != nil || len(empty.Events) != 0 || empty.Next != cur {
		t.Fatalf("empty poll: %+v %v", empty, err)
	}
	if _, err := e.r.PollEvents(ctx, cur+100, 16, 0); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("future cursor: %v", err)
	}
	// Coalescing: a chatty process yields at most one pending log-ready
	// per stream until polled.
	chat := e.spawn(ctx, "i=0; while [ $i -lt 200 ]; do echo line $i; i=$((i+1)); done; sleep 100", PersistOptions{})
	e.readUntil(ctx, chat, Stdout, "line 199")
	// Events are pushed by the process's watcher, which may lag the log;
	// nothing consumes them before this poll, so the first batch holds
	// exactly the one coalesced log-ready however late it was pushed.
	b, _ = e.r.PollEvents(ctx, cur, 1024, 5*time.Second)
	n := 0
	for _, ev := range b.Events {
		if ev.ID == chat && ev.Kind == EventLogReady {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d log-ready events for one unpolled stream", n)
	}
	cur = b.Next
	e.r.Stop(ctx, chat, ptr(time.Duration(0)))
	// Retention: more events than retained → missed.
	for range 10 {
		x := e.spawn(ctx, "true", PersistOptions{})
		e.wait(ctx, x)
		e.r.Release(ctx, x)
	}
	b, err = e.r.PollEvents(ctx, cur, 1024, 0)
	if err != nil || b.Missed == 0 || len(b.Events) != 8 || b.Events[0].Seq != cur+1+b.Missed {
		t.Fatalf("missed: missed=%d n=%d %v", b.Missed, len(b.Events), err)
	}
	// Other principals see none of it.
	if b, _ := e.r.PollEvents(as("cap", "bob"), 0, 1024, 0); len(b.Events) != 0 {
		t.Fatalf("bob sees %d events", len(b.Events))
	}
}

func TestStdinDrainedEvent(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	id := e.spawn(ctx, "sleep 0.5; cat >/dev/null", PersistOptions{KeepStdinOpen: true})
	cur := lastSeq(t, e, ctx)
	data := bytes.Repeat([]byte("x"), 512<<10) // larger than a pipe buffer: blocks until cat reads
	if n, err := e.r.WriteStdin(ctx, id, data); err != nil || n != len(data) {
		t.Fatalf("blocking write: %d %v", n, err)
	}
	b, err := e.r.PollEvents(ctx, cur, 16, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range b.Events {
		found = found || (ev.Kind == EventStdinDrained && ev.ID == id)
	}
	if !found {
		t.Fatalf("no stdin-drained: %+v", b.Events)
	}
	e.r.Stop(ctx, id, ptr(time.Duration(0)))
}

func TestBackpressureReadSinceAcks(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as("cap", "alice")
	const total = 1 << 20
	id := e.spawn(ctx, "head -c 1048576 /dev/zero; echo done >&2", PersistOptions{Overflow: 2, LogRingBytes: ptr(uint32(16 << 10))})
	var got int
	var cur *string
	deadline := time.Now().Add(20 * time.Second)
	for got < total && time.Now().Before(deadline) {
		c, err := e.r.ReadSince(ctx, id, Stdout, cur, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		if c.BytesDropped != 0 {
			t.Fatalf("backpressure dropped %d", c.BytesDropped)
		}
		got += len(c.Data)
		cur = &c.Next
		if len(c.Data) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if got != total {
		t.Fatalf("read %d of %d: the writer stayed blocked", got, total)
	}
	e.wait(ctx, id)
	if !strings.Contains(string(e.readUntil(ctx, id, Stderr, "done")), "done") {
		t.Fatal("stderr")
	}
}

package wasip2_test

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
	"github.com/capsule-host/capsule-host/host/internal/wasip2"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

//go:embed testdata/guest.wasm
var guest []byte

type fixture struct {
	in  engine.Instance
	out *testutil.SyncBuffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	out := &testutil.SyncBuffer{}
	e, err := wazero.New(ctx, engine.EngineConfig{}, wasip2.Funcs(wasip2.Config{Stdout: out}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	m, err := e.Compile(ctx, guest)
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.Instantiate(ctx, engine.InstanceConfig{Name: "wasip2#1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(ctx) })
	return &fixture{in: in, out: out}
}

func (f *fixture) call(t *testing.T, name string, params ...uint64) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := f.in.Call(ctx, name, params...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(r) == 0 {
		return 0
	}
	return r[0]
}

// TestNoAmbientAuthority: no preopens, no environment, an empty stdin,
// and every filesystem call is a WASI error, never a host file.
func TestNoAmbientAuthority(t *testing.T) {
	f := newFixture(t)
	if n := f.call(t, "dirs"); n != 0 {
		t.Fatalf("%d preopens, want 0", n)
	}
	if n := f.call(t, "env"); n != 0 {
		t.Fatalf("%d environment variables, want 0", n)
	}
	if got := f.call(t, "read-stdin"); got != 1*256+1 {
		t.Fatalf("stdin read = %#x, want error closed (0x101)", got)
	}
	// bad-descriptor (3) for a descriptor that cannot exist.
	for _, h := range []uint64{0, 1, 7, 0xffffffff} {
		if got := f.call(t, "stat", h); got != 1*256+3 {
			t.Fatalf("stat(%d) = %#x, want error bad-descriptor (0x103)", h, got)
		}
		if got := f.call(t, "open-passwd", h); got != 1*256+3 {
			t.Fatalf("open-at(%d, /etc/passwd) = %#x, want error bad-descriptor (0x103)", h, got)
		}
	}
}

func TestStdoutStreams(t *testing.T) {
	f := newFixture(t)
	h := f.call(t, "get-stdout")
	mem := f.in.Memory()
	if !mem.Write(512, []byte("hello wasi\n")) {
		t.Fatal("write")
	}
	if got := f.call(t, "write", h, 512, 11); got != 0 {
		t.Fatalf("write result %d, want ok", got)
	}
	if got := f.out.String(); got != "hello wasi\n" {
		t.Fatalf("stdout %q", got)
	}
	f.call(t, "drop-out", h)
	// A handle dropped twice, or used after its drop, traps that call.
	var trap *engine.Trap
	if _, err := f.in.Call(context.Background(), "drop-out", h); !errors.As(err, &trap) || !strings.Contains(trap.Reason, wasip2.ErrResource.Error()) {
		t.Fatalf("second drop: %v", err)
	}
}

func TestClocksRandomExit(t *testing.T) {
	f := newFixture(t)
	n := f.call(t, "random", 32)
	b, ok := f.in.Memory().Read(uint32(f.call(t, "random-ptr")), 32)
	if n != 32 || !ok || bytes.Equal(b, make([]byte, 32)) {
		t.Fatalf("random: %d bytes %x", n, b)
	}
	t0 := f.call(t, "now")
	start := time.Now()
	if ready := f.call(t, "sleep", uint64(20*time.Millisecond)); ready != 1 {
		t.Fatalf("poll returned %d ready", ready)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("poll of a 20ms subscription returned after %v", el)
	}
	if t1 := f.call(t, "now"); t1 <= t0 {
		t.Fatalf("monotonic clock went from %d to %d", t0, t1)
	}
	var trap *engine.Trap
	if _, err := f.in.Call(context.Background(), "exit", 1); !errors.As(err, &trap) || trap.Reason != "guest exited with code 1" {
		t.Fatalf("exit: %v", err)
	}
}

// TestPollInterrupted: a poll past the call's deadline ends the call.
func TestPollInterrupted(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := f.in.Call(ctx, "sleep", uint64(time.Hour)); err == nil {
		t.Fatal("an hour's poll returned within the deadline")
	}
}

func TestModules(t *testing.T) {
	for _, m := range wasip2.Modules() {
		if !strings.HasPrefix(m, "wasi:") || !strings.HasSuffix(m, "@"+wasip2.Version) {
			t.Fatalf("module %q", m)
		}
	}
}

package keeper_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// TestErrors: the keeper's errors keep their classes across the wire.
func TestErrors(t *testing.T) {
	dir := newDir(t)
	marker := filepath.Base(dir)
	startKeeper(t, dir)
	c := dial(t, dir)
	ctx := ctxT(t, 30*time.Second)

	_, err := c.Start(ctx, spec(marker, "/nonexistent/keeper-test", marker))
	var se *sandbox.SpawnError
	if !errors.As(err, &se) || se.Argv0 != "/nonexistent/keeper-test" || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, sandbox.ErrSpawn) {
		t.Fatalf("spawn of a missing program: %v", err)
	}
	bad := spec(marker, "relative")
	if _, err := c.Start(ctx, bad); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("relative argv[0]: %v", err)
	}
	bad = spec(marker, "/bin/echo", "\xff\xfe")
	if _, err := c.Start(ctx, bad); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("argv that is not UTF-8: %v", err)
	}
	ghost := sandbox.Ref{Backend: c.Backend(), ID: "00000000000000000000000000000000", Lifetime: sandbox.LifetimeBackend}
	if _, err := c.Wait(ctx, ghost); !errors.Is(err, keeper.ErrNotFound) || !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("wait of an unknown ref: %v", err)
	}
	if st, err := c.Inspect(ctx, ghost); err != nil || st.Phase != sandbox.PhaseMissing {
		t.Fatalf("inspect of an unknown ref: %+v, %v", st, err)
	}
	if err := c.Cleanup(ctx, ghost); err != nil {
		t.Fatalf("cleanup of an unknown ref: %v", err)
	}
	if _, err := c.Wait(ctx, sandbox.Ref{Backend: "local", ID: "x"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a ref of another backend: %v", err)
	}
	st, err := c.Start(ctx, spec(marker, sleeperArgv(marker)...))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cleanup(ctx, st.Ref); !errors.Is(err, sandbox.ErrRunning) {
		t.Fatalf("cleanup while running: %v", err)
	}
	if _, err := c.Log(st.Ref, keeper.Stdout).ReadFrom(5, 10); !errors.Is(err, sandbox.ErrBadOffset) {
		t.Fatalf("read beyond the end: %v", err)
	}
	if _, err := c.WriteStdin(ctx, st.Ref, []byte("x")); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("stdin write with stdin closed by the spec: %v", err)
	}
	if err := c.Shutdown(ctx, false); !errors.Is(err, sandbox.ErrRunning) {
		t.Fatalf("shutdown without stop_all while running: %v", err)
	}
	if _, err := c.Terminate(ctx, st.Ref, sandbox.Graceful); err != nil {
		t.Fatalf("the keeper must still serve after a refused shutdown: %v", err)
	}
}

// TestLogSemantics: a RemoteLog answers as the keeper's OutputLog does,
// including Drain/Ack under backpressure (the writer stalls until the
// reader acknowledges, and nothing is lost).
func TestLogSemantics(t *testing.T) {
	dir := newDir(t)
	marker := filepath.Base(dir)
	startKeeper(t, dir)
	c := dial(t, dir)
	ctx := ctxT(t, 60*time.Second)
	sp := spec(marker, "/usr/bin/perl", "-e", `print "x" x 1048576; print STDERR "err\n"`, marker)
	sp.Output.Overflow, sp.Output.RingBytes, sp.Output.SpillBytes = sandbox.Backpressure, 64<<10, 0
	st, err := c.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	out, errl := c.Log(st.Ref, keeper.Stdout), c.Log(st.Ref, keeper.Stderr)
	total := 0
	for {
		ch := out.Changed()
		chunk, err := out.Drain(32 << 10)
		if err != nil || chunk.Dropped != 0 || len(bytes.Trim(chunk.Data, "x")) != 0 {
			t.Fatalf("drain: %+v, %v", chunk, err)
		}
		total += len(chunk.Data)
		if chunk.EOF {
			break
		}
		if len(chunk.Data) == 0 {
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("drained %d bytes, then no progress", total)
			}
		}
		if ahead := out.End() - int64(total); ahead > 64<<10 {
			t.Fatalf("backpressure: the writer is %d bytes ahead of the drain cursor, ring is 64 KiB", ahead)
		}
	}
	if total != 1<<20 || out.End() != 1<<20 || !out.Closed() || out.Dropped() != 1<<20-64<<10 {
		t.Fatalf("drained %d of %d bytes; end %d closed %v dropped %d", total, 1<<20, out.End(), out.Closed(), out.Dropped())
	}
	if got := string(waitFor(t, errl, 10*time.Second, func(b []byte) bool { return len(b) == 4 })); got != "err\n" {
		t.Fatalf("stderr %q", got)
	}
	select {
	case <-out.Changed():
	default:
		t.Fatal("Changed of a closed stream must be closed already")
	}
	ch, err := out.ReadFrom(out.End(), 10)
	if err != nil || len(ch.Data) != 0 || !ch.EOF || ch.Next != 1<<20 {
		t.Fatalf("read at the end of a closed stream: %+v, %v", ch, err)
	}
	ch, err = out.ReadFrom(0, 16<<20)
	if err != nil || ch.Dropped != int64(1<<20-64<<10) || len(ch.Data) != 64<<10 || out.Retained() != 64<<10 {
		t.Fatalf("read from 0 without spill: dropped %d, want %d", ch.Dropped, 1<<20-64<<10)
	}
	// The same writer, followed with ReadFrom and Ack instead of Drain.
	st, err = c.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	out = c.Log(st.Ref, keeper.Stdout)
	var off int64
	for {
		ch := out.Changed()
		chunk, err := out.ReadFrom(off, 48<<10)
		if err != nil || chunk.Dropped != 0 {
			t.Fatalf("read at %d: %+v, %v", off, chunk.Dropped, err)
		}
		off = chunk.Next
		out.Ack(off)
		if chunk.EOF {
			break
		}
		if len(chunk.Data) == 0 {
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("read %d bytes, then no progress", off)
			}
		}
		if ahead := out.End() - off; ahead > 64<<10 {
			t.Fatalf("backpressure: the writer is %d bytes ahead of the ack, ring is 64 KiB", ahead)
		}
	}
	if off != 1<<20 {
		t.Fatalf("read %d bytes with ack, want %d", off, 1<<20)
	}
}

// TestSubreaper: an orphaned grandchild is re-parented to the keeper
// (local.New made it the child subreaper), not to init.
func TestSubreaper(t *testing.T) {
	dir := newDir(t)
	marker := filepath.Base(dir)
	p := startKeeper(t, dir)
	c := dial(t, dir)
	ctx := ctxT(t, 30*time.Second)
	st, err := c.Start(ctx, spec(marker, "/usr/bin/bash", "-c", `(exec -a "$0-grand" /usr/bin/sleep 1000 &); exec -a "$0" /usr/bin/sleep 1000`, marker))
	if err != nil {
		t.Fatal(err)
	}
	// The subshell that forked the grandchild exits asynchronously, so
	// the grandchild is re-parented some time after it appears: poll.
	var grand []int
	var s procfs.Stat
	pollUntil(t, 10*time.Second, "the grandchild re-parented to the keeper", func() bool {
		if grand = withMarker(marker + "-grand"); len(grand) != 1 {
			return false
		}
		s, err = procfs.ReadStat(grand[0])
		return err == nil && s.PPID == p.PID
	})
	x, err := c.Terminate(ctx, st.Ref, sandbox.Force)
	if err != nil || x.Signal != syscall.SIGKILL {
		t.Fatalf("terminate: %+v, %v", x, err)
	}
	waitDead(t, grand[0], s.Start, 10*time.Second)
}

// TestShutdownStopAll: stop_all terminates everything gracefully and
// records each exit before the keeper exits; a later keeper serves them.
func TestShutdownStopAll(t *testing.T) {
	dir := newDir(t)
	marker := filepath.Base(dir)
	p := startKeeper(t, dir)
	c := dial(t, dir)
	ctx := ctxT(t, 60*time.Second)
	var refs []sandbox.Ref
	for i := 0; i < 3; i++ {
		st, err := c.Start(ctx, spec(marker, sleeperArgv(marker)...))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, st.Ref)
	}
	if err := c.Shutdown(ctx, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("keeper did not exit after shutdown")
	}
	if left := guests(marker); len(left) != 0 {
		t.Fatalf("left after shutdown: %v", left)
	}
	startKeeper(t, dir)
	c = dial(t, dir)
	for _, r := range refs {
		x, err := c.Wait(ctx, r)
		if err != nil || x.Signal != syscall.SIGTERM || x.Reason != keeper.ReasonExited {
			t.Fatalf("%s after a restart: %+v, %v", r.ID, x, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "procs", r.ID, "exit.json"))
		if err != nil || !bytes.Contains(b, []byte(`"signal": `+strconv.Itoa(int(syscall.SIGTERM)))) {
			t.Fatalf("exit record: %s, %v", b, err)
		}
	}
}

// TestBackendCloseWaitsForKeeper: Close returns only once the keeper it
// shut down has exited, whether it stopped processes (stop_all) or held
// none, so a daemon that logs "stopped" leaves no keeper behind it.
func TestBackendCloseWaitsForKeeper(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stopAll bool
	}{{"stop-all", true}, {"idle", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			marker := filepath.Base(dir)
			b, err := keeper.NewBackend(keeper.Config{Dir: dir, Name: "local", FrameTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 60*time.Second)
			argv := sleeperArgv(marker)
			if !tc.stopAll {
				argv = []string{"/bin/true"}
			}
			h, err := b.Start(ctx, spec(marker, argv...))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.stopAll {
				if _, err := h.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			c := dial(t, dir)
			pid := c.KeeperPID()
			start := procfs.StartTime(pid)
			c.Close()
			if err := b.Close(ctx, tc.stopAll); err != nil {
				t.Fatalf("close: %v", err)
			}
			if alive(pid, start) {
				t.Fatalf("keeper %d still running when Close returned", pid)
			}
			if left := guests(marker); len(left) != 0 {
				t.Fatalf("left after close: %v", left)
			}
		})
	}
}

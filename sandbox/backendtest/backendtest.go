// Package backendtest is the conformance suite every sandbox.Backend must
// pass. It drives real processes through a POSIX shell and common tools
// (sh, sleep, head, printf, cat, wc, dd, seq, setsid, env, tr): the
// Debian host has them, and so does a busybox rootfs.
//
// Use it from a backend's tests:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, backendtest.Factory{
//			New:   func(t testing.TB) sandbox.Backend { ... },
//			Shell: "/bin/sh",
//		})
//	}
//
// A case that cannot apply to a sandbox is listed in Factory.Skip with the
// reason; the suite logs it loudly.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox"
)

// Case names, for Factory.Skip.
const (
	CaseExitStatus        = "exit-status"
	CaseSpawnError        = "spawn-error"
	CaseInvalidSpec       = "invalid-spec"
	CaseIgnoreSIGTERM     = "ignore-sigterm"
	CaseDoubleFork        = "double-fork"
	CaseGrandchildStdout  = "grandchild-holds-stdout"
	CaseFlood             = "flood-1gib"
	CaseExitBeforeRead    = "exit-before-read"
	CaseConcurrentWaiters = "concurrent-waiters"
	CaseAfterExit         = "after-exit"
	CaseUTF8Split         = "utf8-split"
	CaseBackpressure      = "backpressure"
	CaseStdinSlowReader   = "stdin-slow-reader"
	CaseStdinCancel       = "stdin-cancel"
	CaseCleanupRunning    = "cleanup-running"
	CaseRelease           = "release"
	CaseInspect           = "inspect"
	CaseSpill             = "spill"
	CaseEnv               = "env"
	CaseLimitMemory       = "limit-memory"
	CaseLimitPids         = "limit-pids"
	CaseLimitOpenFiles    = "limit-open-files"
	CaseLimitCPU          = "limit-cpu"
	CaseStats             = "stats"
)

// Factory describes the backend under test.
type Factory struct {
	// New returns a fresh backend.
	New func(t testing.TB) sandbox.Backend
	// Shell is the absolute path of a POSIX shell as the process sees it.
	Shell string
	// Adjust edits every spec the suite builds (workspace, isolation,
	// paths as the sandbox sees them). Optional.
	Adjust func(t testing.TB, spec *sandbox.ProcessSpec)
	// Skip maps a case name to the reason it does not apply.
	Skip map[string]string
	// HostPIDs: processes of the sandbox are visible in the host's /proc
	// (false for gVisor); enables host-side checks for escaped processes.
	HostPIDs bool
}

// Run runs every case as a subtest.
func Run(t *testing.T, f Factory) {
	if f.New == nil || f.Shell == "" {
		t.Fatal("backendtest: Factory.New and Factory.Shell are required")
	}
	cases := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{CaseExitStatus, testExitStatus},
		{CaseSpawnError, testSpawnError},
		{CaseInvalidSpec, testInvalidSpec},
		{CaseIgnoreSIGTERM, testIgnoreSIGTERM},
		{CaseDoubleFork, testDoubleFork},
		{CaseGrandchildStdout, testGrandchildStdout},
		{CaseFlood, testFlood},
		{CaseExitBeforeRead, testExitBeforeRead},
		{CaseConcurrentWaiters, testConcurrentWaiters},
		{CaseAfterExit, testAfterExit},
		{CaseUTF8Split, testUTF8Split},
		{CaseBackpressure, testBackpressure},
		{CaseStdinSlowReader, testStdinSlowReader},
		{CaseStdinCancel, testStdinCancel},
		{CaseCleanupRunning, testCleanupRunning},
		{CaseRelease, testRelease},
		{CaseInspect, testInspect},
		{CaseSpill, testSpill},
		{CaseEnv, testEnv},
		{CaseLimitMemory, testLimitMemory},
		{CaseLimitPids, testLimitPids},
		{CaseLimitOpenFiles, testLimitOpenFiles},
		{CaseLimitCPU, testLimitCPU},
		{CaseStats, testStats},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := f.Skip[c.name]; ok {
				t.Skipf("SKIPPED conformance case %q for this backend: %s", c.name, why)
			}
			s := &suite{f: f, b: f.New(t)}
			c.fn(t, s)
			s.checkNoZombies(t)
		})
	}
}

type suite struct {
	f Factory
	b sandbox.Backend
}

// spec is the base spec: shell script, closed stdin, 64 KiB ring, 1 MiB
// spill, 2 s grace and drain.
func (s *suite) spec(t testing.TB, script string, args ...string) sandbox.ProcessSpec {
	sp := sandbox.ProcessSpec{
		Argv:   append([]string{s.f.Shell, "-c", script, "conformance"}, args...),
		Cwd:    t.TempDir(),
		Env:    []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG=C.UTF-8"},
		Stdin:  sandbox.StdinSpec{Mode: sandbox.StdinClosed},
		Output: sandbox.OutputSpec{RingBytes: 64 << 10, SpillBytes: 1 << 20, Overflow: sandbox.DropOldest, SpillDir: t.TempDir()},
		Grace:  2 * time.Second,
		Drain:  2 * time.Second,
		Label:  t.Name(),
	}
	if s.f.Adjust != nil {
		s.f.Adjust(t, &sp)
	}
	return sp
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) start(t testing.TB, sp sandbox.ProcessSpec) sandbox.Handle {
	t.Helper()
	h, err := s.b.Start(ctxT(t, 30*time.Second), sp)
	if err != nil {
		t.Fatalf("Start(%q): %v", sp.Argv, err)
	}
	t.Cleanup(func() {
		// Never leave a process behind, whatever the test did.
		h.Terminate(context.Background(), sandbox.Force)
		s.b.Cleanup(context.Background(), h.Ref())
	})
	return h
}

// startLimited starts a spec with a cgroup limit. A machine where the limit
// cannot be enforced must say so with ErrLimitsUnsupported naming it; the
// case is then skipped LOUDLY (backends assert in their own tests that
// their limits work where the controllers exist).
func (s *suite) startLimited(t *testing.T, sp sandbox.ProcessSpec, limit string) sandbox.Handle {
	t.Helper()
	h, err := s.b.Start(ctxT(t, 30*time.Second), sp)
	if errors.Is(err, sandbox.ErrLimitsUnsupported) {
		if !strings.Contains(err.Error(), limit) {
			t.Fatalf("ErrLimitsUnsupported without naming %q: %v", limit, err)
		}
		t.Skipf("SKIPPED: this machine cannot enforce a %s limit for this backend: %v", limit, err)
	}
	if err != nil {
		t.Fatalf("Start(%q) with a %s limit: %v", sp.Argv, limit, err)
	}
	t.Cleanup(func() {
		h.Terminate(context.Background(), sandbox.Force)
		s.b.Cleanup(context.Background(), h.Ref())
	})
	return h
}

func (s *suite) wait(t testing.TB, h sandbox.Handle) sandbox.Exit {
	t.Helper()
	e, err := h.Wait(ctxT(t, 60*time.Second))
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return e
}

// ReadAll reads a whole stream from offset 0 and returns it with the
// number of bytes the log reported dropped on the way.
func ReadAll(t testing.TB, l sandbox.Log) (data []byte, dropped int64) {
	t.Helper()
	var off int64
	for {
		c, err := l.ReadFrom(off, 1<<20)
		if err != nil {
			t.Fatalf("ReadFrom(%d): %v", off, err)
		}
		dropped += c.Dropped
		data = append(data, c.Data...)
		off = c.Next
		if c.EOF || len(c.Data) == 0 {
			return data, dropped
		}
	}
}

// readAll is ReadAll failing on any drop.
// spillPath is the log's spill file where the log is local to this
// process (an *OutputLog); "" for a log read through a keeper, whose
// files the keeper owns.
func spillPath(l sandbox.Log) string {
	if sp, ok := l.(interface{ SpillPath() string }); ok {
		return sp.SpillPath()
	}
	return ""
}

func readAll(t testing.TB, l sandbox.Log) []byte {
	t.Helper()
	b, dropped := ReadAll(t, l)
	if dropped != 0 {
		t.Fatalf("%d bytes dropped", dropped)
	}
	return b
}

// waitOutput waits until the stream contains want.
func waitOutput(t testing.TB, l sandbox.Log, want string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		ch := l.Changed()
		c, _ := l.ReadFrom(0, 1<<20)
		if bytes.Contains(c.Data, []byte(want)) {
			return
		}
		if l.Closed() {
			t.Fatalf("stream closed without %q; got %q", want, c.Data)
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no %q in output after %v; got %q", want, d, c.Data)
		}
	}
}

// hostProcsWith lists host PIDs whose command line contains marker.
func hostProcsWith(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(marker)) {
			out = append(out, pid)
		}
	}
	return out
}

// checkNoZombies fails if this test process has zombie children for more
// than a moment (an unreaped child is a leak, whoever forked it).
func (s *suite) checkNoZombies(t *testing.T) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		z := testutil.ZombieChildren()
		if len(z) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("zombie children of the host remain: %v", z)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testExitStatus(t *testing.T, s *suite) {
	for _, tc := range []struct {
		script string
		code   int
		sig    syscall.Signal
	}{
		{"exit 0", 0, 0},
		{"exit 7", 7, 0},
		{"kill -KILL $$", 0, syscall.SIGKILL},
		{"kill -TERM $$", 0, syscall.SIGTERM},
	} {
		h := s.start(t, s.spec(t, tc.script))
		e := s.wait(t, h)
		if e.Code != tc.code || e.Signal != tc.sig {
			t.Errorf("%q: exit %+v, want code %d signal %v", tc.script, e, tc.code, tc.sig)
		}
		if e.At.IsZero() {
			t.Errorf("%q: Exit.At is zero", tc.script)
		}
	}
}

func testSpawnError(t *testing.T, s *suite) {
	sp := s.spec(t, "")
	sp.Argv = []string{"/nonexistent/capsule-conformance"}
	_, err := s.b.Start(ctxT(t, 10*time.Second), sp)
	if !errors.Is(err, sandbox.ErrSpawn) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Start of a missing program: %v, want ErrSpawn and fs.ErrNotExist", err)
	}
	var se *sandbox.SpawnError
	if !errors.As(err, &se) || se.Argv0 != sp.Argv[0] {
		t.Fatalf("Start of a missing program: %v is not a *SpawnError naming it", err)
	}
}

func testInvalidSpec(t *testing.T, s *suite) {
	for _, tc := range []struct {
		field string
		edit  func(*sandbox.ProcessSpec)
	}{
		{"argv", func(p *sandbox.ProcessSpec) { p.Argv = nil }},
		{"argv[0]", func(p *sandbox.ProcessSpec) { p.Argv = []string{"sh"} }},
		{"cwd", func(p *sandbox.ProcessSpec) { p.Cwd = "" }},
		{"env[0]", func(p *sandbox.ProcessSpec) { p.Env = []string{"NOEQUALS"} }},
		{"stdin.mode", func(p *sandbox.ProcessSpec) { p.Stdin.Mode = 0 }},
		{"output.ring-bytes", func(p *sandbox.ProcessSpec) { p.Output.RingBytes = 0 }},
		{"output.overflow", func(p *sandbox.ProcessSpec) { p.Output.Overflow = 0 }},
		{"output.spill-bytes", func(p *sandbox.ProcessSpec) { p.Output.SpillBytes = -1 }},
		{"output.spill-dir", func(p *sandbox.ProcessSpec) { p.Output.SpillDir = "" }},
		{"grace", func(p *sandbox.ProcessSpec) { p.Grace = 0 }},
		{"drain", func(p *sandbox.ProcessSpec) { p.Drain = 0 }},
		{"limits.memory", func(p *sandbox.ProcessSpec) { p.Limits.MemoryBytes = -1 }},
		// Refused by every backend: a zero size where terminals run, the
		// terminal itself where they do not.
		{"terminal", func(p *sandbox.ProcessSpec) { p.Terminal = &sandbox.TerminalSpec{Rows: 0, Cols: 80, Term: "xterm"} }},
	} {
		sp := s.spec(t, "exit 0")
		tc.edit(&sp)
		h, err := s.b.Start(ctxT(t, 10*time.Second), sp)
		if err == nil {
			h.Terminate(context.Background(), sandbox.Force)
			t.Errorf("%s: Start accepted an invalid spec", tc.field)
			continue
		}
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Start error %q: want ErrInvalidSpec naming %q", tc.field, err, tc.field)
		}
	}
}

func testIgnoreSIGTERM(t *testing.T, s *suite) {
	sp := s.spec(t, `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	sp.Grace = 300 * time.Millisecond
	h := s.start(t, sp)
	waitOutput(t, h.Stdout(), "ready", 10*time.Second)
	_, err := h.Terminate(ctxT(t, 10*time.Second), sandbox.Graceful)
	if !errors.Is(err, sandbox.ErrGracefulTimeout) {
		t.Fatalf("graceful terminate of a TERM-ignoring child: %v, want ErrGracefulTimeout", err)
	}
	select {
	case <-h.Done():
		t.Fatal("graceful timeout escalated: the process is done")
	default:
	}
	e, err := h.Terminate(ctxT(t, 10*time.Second), sandbox.Force)
	if err != nil {
		t.Fatalf("force terminate: %v", err)
	}
	if e.Signal != syscall.SIGKILL {
		t.Fatalf("force terminate: exit %+v, want SIGKILL", e)
	}
}

func testDoubleFork(t *testing.T, s *suite) {
	marker := fmt.Sprintf("capsule-daemon-%d-%d", os.Getpid(), time.Now().UnixNano())
	// The subshell backgrounds a setsid'd loop and exits: the loop is
	// orphaned, in its own session and group, with no pipe open.
	script := `( setsid "$0" -c 'while :; do sleep 1; done' "$1" </dev/null >/dev/null 2>&1 & ) ; echo forked; while :; do sleep 1; done`
	sp := s.spec(t, script, marker)
	sp.Argv = []string{s.f.Shell, "-c", script, s.f.Shell, marker}
	h := s.start(t, sp)
	waitOutput(t, h.Stdout(), "forked", 10*time.Second)
	if s.f.HostPIDs {
		deadline := time.Now().Add(5 * time.Second)
		for len(hostProcsWith(marker)) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("daemon never appeared")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := h.Terminate(ctxT(t, 20*time.Second), sandbox.Force); err != nil {
		t.Fatalf("force terminate: %v", err)
	}
	if s.f.HostPIDs {
		if left := hostProcsWith(marker); len(left) > 0 {
			t.Fatalf("double-forked daemon survived a forced terminate: pids %v", left)
		}
	}
}

func testGrandchildStdout(t *testing.T, s *suite) {
	marker := fmt.Sprintf("capsule-holder-%d-%d", os.Getpid(), time.Now().UnixNano())
	script := `( sleep 0.3; echo late; exec "$0" -c 'while :; do sleep 1; done' "$1" ) & echo early; exit 5`
	sp := s.spec(t, script)
	sp.Argv = []string{s.f.Shell, "-c", script, s.f.Shell, marker}
	sp.Drain = 1500 * time.Millisecond
	h := s.start(t, sp)
	// Wait must return although the grandchild holds stdout forever.
	e, err := h.Wait(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatalf("Wait with a grandchild holding stdout: %v", err)
	}
	if e.Code != 5 {
		t.Errorf("exit %+v, want code 5 (the root's)", e)
	}
	out := string(readAll(t, h.Stdout()))
	if out != "early\nlate\n" {
		t.Errorf("stdout %q: output written during the drain must reach the log", out)
	}
	if !h.Stdout().Closed() {
		t.Error("stdout not closed after settling")
	}
	if s.f.HostPIDs {
		if left := hostProcsWith(marker); len(left) > 0 {
			t.Errorf("grandchild survived settlement: pids %v", left)
		}
	}
}

func testFlood(t *testing.T, s *suite) {
	const total = 1 << 30
	sp := s.spec(t, fmt.Sprintf("head -c %d /dev/zero; echo done >&2", total))
	sp.Output.RingBytes = 1 << 20
	sp.Output.SpillBytes = 4 << 20
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	h := s.start(t, sp)
	var peak uint64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-h.Done():
			break loop
		case <-tick.C:
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	e := s.wait(t, h)
	if e.Code != 0 {
		t.Fatalf("flood exit %+v", e)
	}
	if got := h.Stdout().End(); got != total {
		t.Fatalf("stdout end %d, want %d", got, total)
	}
	c, err := h.Stdout().ReadFrom(0, 16)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(total - sp.Output.SpillBytes); c.Dropped != want {
		t.Errorf("ReadFrom(0) dropped %d, want %d (everything beyond the spill cap)", c.Dropped, want)
	}
	// Bound: two rings plus a small constant (pump buffers, test noise).
	bound := uint64(2*sp.Output.RingBytes) + 24<<20
	if peak > base && peak-base > bound {
		t.Errorf("host heap grew by %d MiB during a 1 GiB flood, bound %d MiB", (peak-base)>>20, bound>>20)
	}
	t.Logf("1 GiB flood: heap in use grew by at most %.1f MiB (ring 1 MiB x2)", float64(peak-min(peak, base))/(1<<20))
}

func testExitBeforeRead(t *testing.T, s *suite) {
	h := s.start(t, s.spec(t, "echo out; echo err >&2; exit 3"))
	select {
	case <-h.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("not done")
	}
	if got := string(readAll(t, h.Stdout())); got != "out\n" {
		t.Errorf("stdout %q", got)
	}
	if got := string(readAll(t, h.Stderr())); got != "err\n" {
		t.Errorf("stderr %q", got)
	}
	if e := s.wait(t, h); e.Code != 3 {
		t.Errorf("exit %+v", e)
	}
}

func testConcurrentWaiters(t *testing.T, s *suite) {
	h := s.start(t, s.spec(t, "sleep 0.2; exit 9"))
	var wg sync.WaitGroup
	exits := make([]sandbox.Exit, 50)
	errs := make([]error, 50)
	for i := range exits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exits[i], errs[i] = h.Wait(ctxT(t, 30*time.Second))
		}()
	}
	wg.Wait()
	for i := range exits {
		if errs[i] != nil || exits[i] != exits[0] {
			t.Fatalf("waiter %d: %+v %v, waiter 0: %+v", i, exits[i], errs[i], exits[0])
		}
	}
	if exits[0].Code != 9 {
		t.Fatalf("exit %+v", exits[0])
	}
}

func testAfterExit(t *testing.T, s *suite) {
	h := s.start(t, s.spec(t, "exit 4"))
	e := s.wait(t, h)
	for _, m := range []sandbox.TerminateMode{sandbox.Graceful, sandbox.Force, sandbox.Graceful} {
		t0 := time.Now()
		got, err := h.Terminate(ctxT(t, 10*time.Second), m)
		if err != nil || got != e {
			t.Fatalf("Terminate(%d) after exit: %+v %v, want %+v", m, got, err, e)
		}
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("Terminate after exit took %v: it must not wait or signal", d)
		}
	}
	if err := h.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("Signal after exit: %v, want a no-op", err)
	}
	if got := s.wait(t, h); got != e {
		t.Fatalf("Wait changed after Terminate: %+v vs %+v", got, e)
	}
}

func testUTF8Split(t *testing.T, s *suite) {
	// "€" is E2 82 AC: the first two bytes come alone, the rest after a
	// line on stdin, so the reader is sure to see the split.
	sp := s.spec(t, `printf '\342\202'; read x; printf '\254\n'`)
	sp.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen}
	h := s.start(t, sp)
	l := h.Stdout()
	deadline := time.After(10 * time.Second)
	for l.End() < 2 {
		select {
		case <-l.Changed():
		case <-deadline:
			t.Fatal("first half of the rune never arrived")
		}
	}
	c, err := l.ReadFrom(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	complete, rest := sandbox.SplitUTF8(c.Data)
	if len(complete) != 0 || len(rest) != 2 {
		t.Fatalf("SplitUTF8(%x) = %x, %x: want the partial rune held back", c.Data, complete, rest)
	}
	if _, err := h.Stdin().Write(ctxT(t, 10*time.Second), []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	s.wait(t, h)
	c2, err := l.ReadFrom(c.Next, 100)
	if err != nil {
		t.Fatal(err)
	}
	text, rest2 := sandbox.SplitUTF8(append(rest, c2.Data...))
	if string(text) != "€\n" || len(rest2) != 0 {
		t.Fatalf("rendered %q rest %x, want \"€\\n\"", text, rest2)
	}
}

func testBackpressure(t *testing.T, s *suite) {
	const total = 1 << 20
	sp := s.spec(t, fmt.Sprintf("head -c %d /dev/zero; echo finished >&2", total))
	sp.Output.Overflow = sandbox.Backpressure
	sp.Output.RingBytes = 64 << 10
	sp.Output.SpillBytes = 0
	h := s.start(t, sp)
	// Nobody reads: the writer must stall with at most one ring unacked.
	time.Sleep(300 * time.Millisecond)
	if end := h.Stdout().End(); end > int64(sp.Output.RingBytes) {
		t.Fatalf("backpressure: %d bytes captured with nothing acknowledged, ring is %d", end, sp.Output.RingBytes)
	}
	select {
	case <-h.Done():
		t.Fatal("backpressure: the writer finished although nobody read")
	default:
	}
	var got int64
	deadline := time.After(30 * time.Second)
	for {
		ch := h.Stdout().Changed()
		c, err := h.Stdout().Drain(32 << 10)
		if err != nil {
			t.Fatal(err)
		}
		if c.Dropped != 0 {
			t.Fatalf("backpressure dropped %d bytes", c.Dropped)
		}
		got += int64(len(c.Data))
		if c.EOF {
			break
		}
		if len(c.Data) == 0 {
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("stalled at %d bytes", got)
			}
		}
	}
	if got != total {
		t.Fatalf("drained %d bytes, want %d", got, total)
	}
	if e := s.wait(t, h); e.Code != 0 {
		t.Fatalf("exit %+v", e)
	}
}

func testStdinSlowReader(t *testing.T, s *suite) {
	const total = 10 << 20
	sp := s.spec(t, `sleep 0.3; exec wc -c`)
	sp.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen}
	h := s.start(t, sp)
	data := bytes.Repeat([]byte("0123456789abcdef"), total/16)
	n, err := h.Stdin().Write(ctxT(t, 60*time.Second), data)
	if err != nil || n != total {
		t.Fatalf("Write 10 MiB: n=%d err=%v", n, err)
	}
	if err := h.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Stdin().Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	s.wait(t, h)
	if got := strings.TrimSpace(string(readAll(t, h.Stdout()))); got != strconv.Itoa(total) {
		t.Fatalf("reader counted %q bytes, want %d", got, total)
	}
	if _, err := h.Stdin().Write(ctxT(t, time.Second), []byte("x")); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
}

func testStdinCancel(t *testing.T, s *suite) {
	sp := s.spec(t, `sleep 1000`)
	sp.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen}
	h := s.start(t, sp)
	data := make([]byte, 4<<20) // more than any pipe buffer
	n, err := h.Stdin().Write(ctxT(t, 300*time.Millisecond), data)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write to a non-reader: n=%d err=%v, want context.DeadlineExceeded", n, err)
	}
	if n >= len(data) {
		t.Fatalf("Write reported %d bytes written of %d to a non-reader", n, len(data))
	}
	if n > 0 && !h.Stdin().IsClosed() {
		t.Fatal("a torn write must close stdin")
	}
	if _, err := h.Stdin().Write(ctxT(t, time.Second), []byte("x")); n > 0 && !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Write after a torn write: %v, want ErrClosed", err)
	}
}

func testCleanupRunning(t *testing.T, s *suite) {
	h := s.start(t, s.spec(t, "echo x; sleep 1000"))
	waitOutput(t, h.Stdout(), "x", 10*time.Second)
	spill := spillPath(h.Stdout())
	if err := s.b.Cleanup(ctxT(t, 10*time.Second), h.Ref()); !errors.Is(err, sandbox.ErrRunning) {
		t.Fatalf("Cleanup while running: %v, want ErrRunning", err)
	}
	select {
	case <-h.Done():
		t.Fatal("Cleanup terminated the process")
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := h.Terminate(ctxT(t, 20*time.Second), sandbox.Force); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.b.Cleanup(ctxT(t, 10*time.Second), h.Ref()); err != nil {
			t.Fatalf("Cleanup #%d after exit: %v", i+1, err)
		}
	}
	if spill != "" {
		if _, err := os.Stat(spill); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("spill file %s still there after Cleanup: %v", spill, err)
		}
	}
	in, err := s.b.Inspect(ctxT(t, 10*time.Second), h.Ref())
	if err != nil || in.Phase != sandbox.PhaseMissing {
		t.Fatalf("Inspect after Cleanup: %+v %v, want missing", in, err)
	}
}

func testRelease(t *testing.T, s *suite) {
	h := s.start(t, s.spec(t, "sleep 1000"))
	err := h.Release()
	switch h.Ref().Lifetime {
	case sandbox.LifetimeHandle:
		if !errors.Is(err, sandbox.ErrNotDetachable) {
			t.Fatalf("Release of a running handle-lifetime process: %v, want ErrNotDetachable", err)
		}
		select {
		case <-h.Done():
			t.Fatal("Release ended the process")
		default:
		}
	case sandbox.LifetimeBackend:
		if err != nil {
			t.Fatalf("Release of a running backend-lifetime process: %v", err)
		}
		h2, err := s.b.Attach(ctxT(t, 10*time.Second), h.Ref())
		if err != nil {
			t.Fatalf("Attach after Release: %v", err)
		}
		h = h2
	default:
		t.Fatalf("ref lifetime %v", h.Ref().Lifetime)
	}
	e, err := h.Terminate(ctxT(t, 20*time.Second), sandbox.Force)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("Release after exit: %v", err)
	}
	in, err := s.b.Inspect(ctxT(t, 10*time.Second), h.Ref())
	if err != nil || in.Phase != sandbox.PhaseExited || in.Exit == nil || *in.Exit != e {
		t.Fatalf("Inspect after Release: %+v %v: Release must not forget the exit", in, err)
	}
}

func testInspect(t *testing.T, s *suite) {
	sp := s.spec(t, "read x; exit 2")
	sp.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen}
	h := s.start(t, sp)
	in, err := s.b.Inspect(ctxT(t, 10*time.Second), h.Ref())
	if err != nil || (in.Phase != sandbox.PhaseRunning && in.Phase != sandbox.PhaseStarting) || in.Exit != nil {
		t.Fatalf("Inspect running: %+v %v", in, err)
	}
	h.Stdin().Write(ctxT(t, 10*time.Second), []byte("\n"))
	e := s.wait(t, h)
	in, err = s.b.Inspect(ctxT(t, 10*time.Second), h.Ref())
	if err != nil || in.Phase != sandbox.PhaseExited || in.Exit == nil || *in.Exit != e {
		t.Fatalf("Inspect exited: %+v %v, want the Wait exit %+v", in, err, e)
	}
	bogus := h.Ref()
	bogus.ID = "0000000000000000"
	in, err = s.b.Inspect(ctxT(t, 10*time.Second), bogus)
	if err != nil || in.Phase != sandbox.PhaseMissing {
		t.Fatalf("Inspect unknown: %+v %v, want missing", in, err)
	}
}

func testSpill(t *testing.T, s *suite) {
	sp := s.spec(t, "seq 1 100000")
	sp.Output.RingBytes = 16 << 10
	sp.Output.SpillBytes = 1 << 20
	h := s.start(t, sp)
	s.wait(t, h)
	var want bytes.Buffer
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	got := readAll(t, h.Stdout())
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read back %d bytes through ring+spill, want %d identical", len(got), want.Len())
	}
	if h.Stdout().Retained() > int64(sp.Output.RingBytes) {
		t.Fatalf("ring holds %d bytes, more than %d", h.Stdout().Retained(), sp.Output.RingBytes)
	}
	if p := spillPath(h.Stdout()); p != "" {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("spill file %s: %v %v, want mode 0600", p, st.Mode(), err)
		}
		dst, err := os.Stat(filepath.Dir(p))
		if err != nil || dst.Mode().Perm() != 0o700 {
			t.Fatalf("spill dir: %v %v, want mode 0700", dst.Mode(), err)
		}
	}
}

func testEnv(t *testing.T, s *suite) {
	sp := s.spec(t, `printf '%s|%s|%s' "$CAPSULE_A" "$LANG" "${HOME-unset}"`)
	sp.Env = append(sp.Env, "CAPSULE_A=a b=c")
	h := s.start(t, sp)
	s.wait(t, h)
	if got := string(readAll(t, h.Stdout())); got != "a b=c|C.UTF-8|unset" {
		t.Fatalf("env seen by the process: %q: the spec env must be passed exactly", got)
	}
}

func testLimitMemory(t *testing.T, s *suite) {
	sp := s.spec(t, "exec dd if=/dev/zero of=/dev/null bs=128M count=1")
	sp.Limits.MemoryBytes = 32 << 20
	h := s.startLimited(t, sp, "memory")
	e := s.wait(t, h)
	if e.KilledFor != sandbox.LimitMemory || e.Signal != syscall.SIGKILL {
		t.Fatalf("dd of 128 MiB under a 32 MiB limit: exit %+v, want SIGKILL for memory", e)
	}
}

func testLimitPids(t *testing.T, s *suite) {
	sp := s.spec(t, "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 >/dev/null 2>&1 & done; wait; echo all-forked")
	sp.Limits.Pids = 4
	h := s.startLimited(t, sp, "pids")
	s.wait(t, h)
	out := string(readAll(t, h.Stdout()))
	errOut := string(readAll(t, h.Stderr()))
	if !strings.Contains(errOut, "fork") && !strings.Contains(errOut, "resource") {
		t.Fatalf("10 children under pids=4: stdout %q stderr %q, want a fork failure", out, errOut)
	}
}

func testLimitOpenFiles(t *testing.T, s *suite) {
	sp := s.spec(t, "ulimit -n")
	sp.Limits.OpenFiles = 37
	h := s.start(t, sp)
	s.wait(t, h)
	if got := strings.TrimSpace(string(readAll(t, h.Stdout()))); got != "37" {
		t.Fatalf("ulimit -n = %q, want 37", got)
	}
}

func testLimitCPU(t *testing.T, s *suite) {
	sp := s.spec(t, "ulimit -t; while :; do :; done")
	sp.Limits.CPUTime = 500 * time.Millisecond // rounds up to 1 s
	h := s.start(t, sp)
	e := s.wait(t, h)
	if got := strings.TrimSpace(string(readAll(t, h.Stdout()))); got != "1" {
		t.Errorf("ulimit -t = %q, want 1 (0.5 s rounded up)", got)
	}
	if e.KilledFor != sandbox.LimitCPU {
		t.Fatalf("CPU burner under a 1 s limit: exit %+v, want killed for cpu", e)
	}
}

func testStats(t *testing.T, s *suite) {
	h := s.start(t, s.spec(t, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"))
	s.wait(t, h)
	st := h.Stats()
	if st.CPUTime == nil {
		t.Fatal("Stats().CPUTime is nil: this backend cannot account CPU? list the case in Skip with the reason")
	}
	if *st.CPUTime <= 0 {
		t.Fatalf("Stats().CPUTime = %v for a busy loop", *st.CPUTime)
	}
	if st.MemoryPeak != nil && *st.MemoryPeak <= 0 {
		t.Fatalf("Stats().MemoryPeak = %d: nil when unknown, never a made-up zero", *st.MemoryPeak)
	}
}

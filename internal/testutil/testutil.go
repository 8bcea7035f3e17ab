// Package testutil holds test helpers shared by every layer (sandbox,
// registry, host, capsules, cmd). It imports only the standard library and
// internal/procfs and sandbox/reexec (both standard library only), so any
// test may use it without bending the layering.
package testutil

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// SyncBuffer is a goroutine-safe bytes.Buffer: a log sink or a guest's
// stdout that a test reads while the code under test writes to it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Main is the body of a TestMain for a test binary that starts backend
// processes: the backends re-execute the test binary as their helpers
// (sandbox/reexec), so it must become the helper when asked to. It
// returns the exit code for os.Exit.
func Main(m *testing.M) int {
	reexec.Init()
	return m.Run()
}

// RunWithTempDir is Main for a test binary that shares one temporary
// directory (a compiled-module cache, so each guest is compiled once per
// run, not once per test): it sets *dir, runs the tests, removes the
// directory and returns the exit code for os.Exit.
func RunWithTempDir(m *testing.M, pattern string, dir *string) int {
	reexec.Init()
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		panic(err)
	}
	*dir = d
	defer os.RemoveAll(d)
	return m.Run()
}

// Greeter listens on 127.0.0.1 until the test ends and writes greeting to
// every connection before closing it: what a sandboxed process reaches
// only if it has the network. served receives once per connection (up to
// 16 not yet received).
func Greeter(t testing.TB, greeting string) (port int, served <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(greeting))
			c.Close()
			select {
			case got <- struct{}{}:
			default: // nobody counts: never block the listener
			}
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, got
}

// ZombieChildren lists this process's zombie children as "pid (comm)":
// an unreaped child is a leak, whoever forked it.
func ZombieChildren() []string {
	me := os.Getpid()
	pids, _ := procfs.PIDs()
	var out []string
	for _, pid := range pids {
		st, err := procfs.ReadStat(pid)
		if err == nil && st.Zombie() && st.PPID == me {
			out = append(out, fmt.Sprintf("%d (%s)", st.PID, st.Comm))
		}
	}
	return out
}

// CopyFiles copies the named files of directory from into directory to
// (0600), for a test that edits a copy of a capsule.
func CopyFiles(t testing.TB, from, to string, names ...string) {
	t.Helper()
	for _, n := range names {
		b, err := os.ReadFile(from + string(os.PathSeparator) + n)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+string(os.PathSeparator)+n, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Repeat runs f over and over in n goroutines, each until f returns
// false or stop is called; stop (idempotent) returns once all have
// ended. The hammer of the concurrency tests.
func Repeat(n int, f func() bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if !f() {
					return
				}
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(done) }); wg.Wait() }
}

// Forking keeps n goroutines forking and exec'ing /bin/true, each
// waited for, until the test ends: a process that forks all the time,
// as a busy daemon does (tests of what a fork can catch mid-way).
func Forking(t testing.TB, n int) {
	t.Cleanup(Repeat(n, func() bool { exec.Command("/bin/true").Run(); return true }))
}

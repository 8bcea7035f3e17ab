package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fdCount counts open fds, apart from those under /sys/fs/cgroup: the
// local backend keeps a bounded pool (at most 32 groups, 3 fds each) of
// cgroups open for reuse, and the Go runtime watches its own cgroup's CPU files.
// Those are caches, not leaks; cgroupFDs bounds them separately.
func fdCount() int {
	n, _ := fdCounts()
	return n
}

func fdCounts() (other, cgroup int) {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, d := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + d.Name())
		if strings.HasPrefix(l, "/sys/fs/cgroup/") {
			cgroup++
		} else {
			other++
		}
	}
	return other, cgroup
}

// TestHammer: 32 goroutines make mixed calls, as several principals of two
// capsules, sharing each other's IDs (so most foreign calls must fail
// cleanly), while the capsule is reloaded and a principal evicted. Then
// shutdown must leave no goroutine, fd or process behind.
// REGISTRY_HAMMER=10s runs it longer.
func TestHammer(t *testing.T) {
	dur := 3 * time.Second
	if testing.Short() {
		dur = time.Second
	}
	if v, err := time.ParseDuration(os.Getenv("REGISTRY_HAMMER")); err == nil {
		dur = v
	}
	backends(t)
	runtime.GC()
	baseG, baseFD := runtime.NumGoroutine(), fdCount()

	e := newEnv(t, func(c *Config) {
		c.Defaults.WaitCap = 200 * time.Millisecond
		c.Defaults.EventRetention = 64
		c.Defaults.StopGrace = 100 * time.Millisecond
	})
	e.register("cap2", nil)
	var callers []context.Context
	for _, c := range []string{"cap", "cap2"} {
		for _, p := range []string{"p0", "p1", "p2"} {
			callers = append(callers, as(c, p))
		}
	}
	var (
		idsMu sync.Mutex
		ids   []string
		calls atomic.Int64
		stop  = make(chan struct{})
		wg    sync.WaitGroup
		errMu sync.Mutex
		bad   []error
		okN   [16]atomic.Int64
	)
	pick := func(rng *rand.Rand) string {
		idsMu.Lock()
		defer idsMu.Unlock()
		if len(ids) == 0 || rng.IntN(10) == 0 {
			return "bogus"
		}
		return ids[rng.IntN(len(ids))]
	}
	expected := []error{ErrNoSuchProcess, ErrQuota, ErrRegistryFull, ErrInvalidInput, ErrClosed, ErrWaitTimeout, ErrTornWrite, ErrUnavailable, ErrCapabilityDenied}
	check := func(op string, err error) {
		if err == nil {
			return
		}
		for _, c := range expected {
			if errors.Is(err, c) {
				if errors.Is(err, ErrInvalidInput) && op != "release" && op != "wait(nil)" {
					break
				}
				return
			}
		}
		errMu.Lock()
		bad = append(bad, fmt.Errorf("%s: %w", op, err))
		errMu.Unlock()
	}
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			ctx := callers[g%len(callers)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				calls.Add(1)
				id := pick(rng)
				op := rng.IntN(16)
				switch op {
				case 0, 1:
					script := []string{"sleep 0.05; echo hi", "cat", "echo x; exit 3", "sleep 5"}[rng.IntN(4)]
					nid, err := e.r.SpawnPersistent(ctx, e.sh(script), PersistOptions{KeepStdinOpen: rng.IntN(2) == 0})
					check("spawn-persistent", err)
					if err == nil {
						okN[0].Add(1)
						idsMu.Lock()
						ids = append(ids, nid)
						idsMu.Unlock()
					}
				case 2:
					_, err := e.r.Status(ctx, id)
					check("status", err)
					if err == nil {
						okN[2].Add(1)
					}
					_, err = e.r.List(ctx, nil)
					check("list", err)
					_, err = e.r.StatusMany(ctx, []string{id, pick(rng)})
					check("status-many", err)
				case 3:
					c, err := e.r.ReadSince(ctx, id, Stdout, nil, 64)
					check("read-since", err)
					if err == nil {
						_, err = e.r.ReadSince(ctx, id, Stdout, &c.Next, 64)
						check("read-since", err)
					}
				case 4:
					_, err := e.r.ReadLogs(ctx, id)
					check("read-logs", err)
				case 5:
					_, err := e.r.WriteStdin(ctx, id, []byte("line\n"))
					check("write-stdin", err)
				case 6:
					_, err := e.r.Stop(ctx, id, ptr(50*time.Millisecond))
					check("stop", err)
					if err == nil {
						okN[6].Add(1)
					}
				case 7:
					check("release", e.r.Release(ctx, id))
				case 8:
					check("signal", e.r.Signal(ctx, id, []Signal{SigTerm, SigHup, SigKill, SigCont}[rng.IntN(4)]))
				case 9:
					_, err := e.r.Wait(ctx, id, 20*time.Millisecond)
					check("wait", err)
				case 10:
					h, err := e.r.Attach(ctx, id)
					check("attach", err)
					if err == nil {
						_, err = h.ReadLogs(ctx)
						check("handle.read-logs", err)
						_, err = h.Wait(ctx, nil)
						check("wait(nil)", err)
						_, err = h.OSPid(ctx)
						check("os-pid", err)
						check("drop", h.Drop(ctx))
					}
				case 11:
					h, err := e.r.SpawnBackground(ctx, e.sh("echo bg; sleep 1"))
					check("spawn-background", err)
					if err == nil {
						if rng.IntN(2) == 0 {
							_, err = h.WaitWithOutput(ctx, ptr(10*time.Millisecond))
							check("wait-with-output", err)
						}
						check("drop", h.Drop(context.Background()))
					}
				case 12:
					_, err := e.r.Spawn(ctx, SpawnRequest{Cmd: "/bin/true"})
					check("spawn", err)
				case 13:
					_, err := e.r.PollEvents(ctx, 0, 16, 10*time.Millisecond)
					check("poll-events", err)
				case 14:
					check("close-stdin", e.r.CloseStdin(ctx, id))
				case 15:
					switch rng.IntN(20) {
					case 0:
						e.register("cap", nil) // reload
					case 1:
						check("evict", e.r.EvictPrincipal(context.Background(), "p2"))
					case 2:
						e.clock.Advance(time.Minute)
						e.r.sweep()
					default:
						e.r.OperatorList(OperatorFilter{})
					}
				}
			}
		}()
	}
	time.Sleep(dur)
	close(stop)
	wg.Wait()
	for _, err := range bad {
		t.Error(err)
	}
	if err := e.r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls in %v by 32 goroutines; successful spawns %d, statuses %d, stops %d", calls.Load(), dur, okN[0].Load(), okN[2].Load(), okN[6].Load())
	if n := e.strays(); n != 0 {
		t.Errorf("%d stray processes", n)
	}
	var g, fd int
	for range 100 {
		runtime.GC()
		g, fd = runtime.NumGoroutine(), fdCount()
		if g <= baseG && fd <= baseFD {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if g > baseG {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", baseG, g, buf[:runtime.Stack(buf, true)])
	}
	if _, cg := fdCounts(); cg > 3*32+4 { // ≤32 pooled groups × (dir, cgroup.procs, cpu.stat) + the runtime's
		ents, _ := os.ReadDir("/proc/self/fd")
		var targets []string
		for _, d := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + d.Name())
			targets = append(targets, l)
		}
		t.Errorf("%d cgroup fds open: more than the backend's bounded pool: %v", cg, targets)
	}
	if fd > baseFD {
		ents, _ := os.ReadDir("/proc/self/fd")
		var targets []string
		for _, d := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + d.Name())
			targets = append(targets, l)
		}
		t.Errorf("fds: %d before, %d after: %v", baseFD, fd, targets)
	}
}

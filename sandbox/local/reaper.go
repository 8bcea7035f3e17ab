package local

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// The reaper is process-wide because PR_SET_CHILD_SUBREAPER is: every
// orphan of every tree (of every local or bwrap Backend value) is
// re-parented to this process.
//
// Why not wait(-1): it would also collect children that other code started
// with os/exec (the OCI backend runs runc that way) and whose owner is
// blocked in wait4(pid) — stealing their exit status. The reaper instead
// lists this process's children (/proc/self/task/*/children), and reaps a
// zombie with waitid(P_PID) only when it can prove the zombie is ours:
//   - its cgroup (still readable for a zombie) lies under our
//     "capsule-host" parent or a prefix registered with ClaimOrphans; or
//   - without cgroups, its session is one of our live roots' sessions.
//
// A root is never reaped here: its own settle goroutine reaps it last, so
// its PID (= PGID = SID) stays pinned until nothing will signal it again.
type reaperState struct {
	// mu: Start holds it shared across fork+addRoot; a reap holds it
	// exclusively across the roots check and the waitid, so a root's
	// zombie is never taken for an orphan's before it is registered.
	mu    sync.RWMutex
	tabMu sync.Mutex // guards the maps
	// roots counts registrations per root PID: a root's PID is free the
	// moment its settle goroutine reaps it, so a new root can be forked
	// with the same PID before the old one's removeRoot runs, and that
	// removal must not unregister the new root (whose zombie the scan
	// would then reap, stealing its status and unpinning its PGID).
	roots    map[int]int
	sessions map[int]int // live session IDs (fallback ownership) → refcount
	// lingering holds the sessions of settled trees (without cgroups)
	// whose killed members had not all been reaped when their settle gave
	// up waiting (a loaded machine can take longer than the bound to
	// deliver a SIGKILL): until the deadline the periodic scan still owns
	// their zombies, which would otherwise stay forever once the root's
	// session is unregistered. See ownsLingering for why a reused SID is
	// never taken for one of these.
	lingering map[int]time.Time
	prefixes  map[string]int
	// watched: the roots whose exit the watcher reports (watch.go).
	watched map[int]func(rootEvent)
	kick    chan struct{}
}

// lingerFor bounds how long a settled session's stragglers stay ours.
const lingerFor = time.Minute

var (
	reaper     = &reaperState{roots: map[int]int{}, sessions: map[int]int{}, lingering: map[int]time.Time{}, prefixes: map[string]int{}, watched: map[int]func(rootEvent){}, kick: make(chan struct{}, 1)}
	reaperOnce sync.Once
	reaperErr  error
)

func startReaper() error {
	reaperOnce.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			reaperErr = fmt.Errorf("become child subreaper: %w", err)
			return
		}
		// Our own trees' cgroups, in whatever hierarchy they live: the
		// names this host process gives (groupName), not every group
		// under the parent, where another host's (or a test's) children
		// may sit.
		if s, err := cgroups.Detect(); err == nil {
			sweepStale(s)
			if s.V2 != "" {
				reaper.prefixes[joinCg(s.V2Path, cgroups.Parent)+hostTag+"-"]++
			}
			for c, p := range s.V1Paths {
				if c == "memory" || c == "pids" {
					reaper.prefixes[joinCg(p, cgroups.Parent)+hostTag+"-"]++
				}
			}
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		go func() {
			t := time.NewTicker(time.Second)
			for {
				signalled := false
				select {
				case <-ch:
					signalled = true
				case <-t.C:
				case <-reaper.kick:
				}
				// Watched roots at once: their settling waits on it.
				reaper.peekRoots()
				if signalled {
					// Coalesce bursts of SIGCHLD: one orphan scan per few
					// ms (a signal meanwhile is kept by the channel).
					time.Sleep(5 * time.Millisecond)
				}
				// One cheap waitid first: most wake-ups find no zombie
				// at all, and then there is nothing to list.
				if anyZombieChild() {
					reaper.scan(nil)
				}
			}
		}()
	})
	return reaperErr
}

func joinCg(base, name string) string {
	return strings.TrimSuffix(base, "/") + "/" + name + "/"
}

// ClaimOrphans lets the reaper reap zombie orphans whose cgroup path (as
// /proc/<pid>/cgroup prints it, any hierarchy) starts with prefix — for
// example the cgroups an OCI runtime creates, whose container processes
// are re-parented to this (subreaper) process when the runtime exits.
// Call the returned function to withdraw the claim.
func ClaimOrphans(prefix string) (withdraw func()) {
	reaper.tabMu.Lock()
	reaper.prefixes[prefix]++
	reaper.tabMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			reaper.tabMu.Lock()
			if reaper.prefixes[prefix]--; reaper.prefixes[prefix] <= 0 {
				delete(reaper.prefixes, prefix)
			}
			reaper.tabMu.Unlock()
		})
	}
}

// children lists this process's children, all threads included. Without
// CONFIG_PROC_CHILDREN (no .../children files) it scans /proc for PPID.
func children() []int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/children")
		if err != nil {
			if os.IsNotExist(err) {
				return childrenByScan()
			}
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func childrenByScan() []int {
	pids, err := procfs.PIDs()
	if err != nil {
		return nil
	}
	me := os.Getpid()
	var out []int
	for _, pid := range pids {
		if st, err := procfs.ReadStat(pid); err == nil && st.PPID == me {
			out = append(out, pid)
		}
	}
	return out
}

// dead reports whether a child has exited and awaits reaping ('Z'; 'X'
// is the instant of its release).
func dead(st procfs.Stat) bool { return st.State == 'Z' || st.State == 'X' }

// owns reports whether zombie pid belongs to one of our trees; if
// only is non-empty, whether it belongs to that cgroup path exactly.
func (r *reaperState) owns(pid int, st procfs.Stat, only string) bool {
	r.tabMu.Lock()
	defer r.tabMu.Unlock()
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup"); err == nil {
		for _, p := range cgroups.ParseProcCgroup(b) {
			if only != "" {
				if p == only {
					return true
				}
				continue
			}
			for pre := range r.prefixes {
				if strings.HasPrefix(p+"/", pre) {
					return true
				}
			}
		}
	}
	return only == "" && (r.sessions[st.SID] > 0 || r.ownsLingering(st))
}

// ownsLingering reports whether st is a straggler of a lingering session;
// the caller holds tabMu. The root (PID = SID) was reaped, so its PID may
// be reused, but only a new process can then lead a session with that ID:
// a zombie that is its own session leader is never ours, and neither is
// one in this process's own session (os/exec children inherit it). Any
// other zombie child in that session descends from the settled tree.
func (r *reaperState) ownsLingering(st procfs.Stat) bool {
	until, ok := r.lingering[st.SID]
	switch {
	case !ok:
		return false
	case time.Now().After(until):
		delete(r.lingering, st.SID)
		return false
	}
	return st.PID != st.SID && st.SID != mySID
}

// linger keeps sid's stragglers owned for lingerFor after its root was
// reaped.
func (r *reaperState) linger(sid int) {
	r.tabMu.Lock()
	r.lingering[sid] = time.Now().Add(lingerFor)
	r.tabMu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// mySID is this process's session, which os/exec children share.
var mySID, _ = unix.Getsid(0)

// reap collects zombie pid unless it is a root. The zombie pins its PID
// until reaped, so this waitid can only collect the process inspected.
func (r *reaperState) reap(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tabMu.Lock()
	root := r.roots[pid] > 0
	r.tabMu.Unlock()
	if root {
		return true
	}
	var si unix.Siginfo
	return unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOHANG, nil) == nil
}

func (r *reaperState) isRoot(pid int) bool {
	r.tabMu.Lock()
	defer r.tabMu.Unlock()
	return r.roots[pid] > 0
}

// scan reaps the zombies we own; with only set, just that cgroup's. It
// returns how many children of that cgroup (zombie or not) it saw that it
// could not reap yet.
func (r *reaperState) scan(only *string) (pending int) {
	o := ""
	if only != nil {
		o = *only
	}
	for _, pid := range children() {
		if r.isRoot(pid) {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil {
			continue
		}
		zombie := dead(st)
		if !zombie && o == "" {
			continue
		}
		if !r.owns(pid, st, o) {
			continue
		}
		if !zombie || !r.reap(pid) {
			pending++
		}
	}
	return pending
}

// addRoot registers a just-forked root; the caller holds mu shared.
func (r *reaperState) addRoot(pid int) {
	r.tabMu.Lock()
	r.roots[pid]++
	r.sessions[pid]++ // setsid: SID = PID
	r.tabMu.Unlock()
}

func (r *reaperState) removeRoot(pid int) {
	r.tabMu.Lock()
	if r.roots[pid]--; r.roots[pid] <= 0 {
		delete(r.roots, pid)
	}
	if r.sessions[pid]--; r.sessions[pid] <= 0 {
		delete(r.sessions, pid)
	}
	r.tabMu.Unlock()
}

// reapGroup reaps the zombies of one tree after its members were killed,
// waiting up to timeout for members still in their exit path. It returns
// how many it saw that it could not reap yet.
func (r *reaperState) reapGroup(cgPath string, sid int, timeout time.Duration) (pending int) {
	deadline := time.Now().Add(timeout)
	for delay := 50 * time.Microsecond; ; delay = min(delay*2, 5*time.Millisecond) {
		if cgPath != "" {
			pending = r.scan(&cgPath)
		} else {
			pending = r.scanSession(sid)
		}
		if pending == 0 || time.Now().After(deadline) {
			return pending
		}
		time.Sleep(delay)
	}
}

func (r *reaperState) scanSession(sid int) (pending int) {
	for _, pid := range children() {
		if r.isRoot(pid) {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil || st.SID != sid {
			continue
		}
		if !dead(st) || !r.reap(pid) {
			pending++
		}
	}
	return pending
}

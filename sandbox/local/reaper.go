package local

import (
	"cmp"
	"fmt"
	"os"
	"os/signal"
	"slices"
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
	// waiters: the trees whose settling waits for their zombies
	// (reapGroup); one sweep of the children serves them all.
	waiters []*reapWait
	kick    chan struct{}
	// pause is the SIGCHLD coalescing before an orphan sweep (5 ms when
	// zero); quit ends loop (nil: never). Both for tests of the loop.
	pause time.Duration
	quit  chan struct{}
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
		go reaper.loop(ch)
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

// owns reports whether a zombie with these cgroup paths belongs to one
// of our trees.
func (r *reaperState) owns(paths map[string]string, st procfs.Stat) bool {
	r.tabMu.Lock()
	defer r.tabMu.Unlock()
	for _, p := range paths {
		for pre := range r.prefixes {
			if strings.HasPrefix(p+"/", pre) {
				return true
			}
		}
	}
	return r.sessions[st.SID] > 0 || r.ownsLingering(st)
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
	r.poke()
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

// reapWait is one settling tree's wait for its zombies: the members of
// cgroup cg (as /proc/<pid>/cgroup prints it) or, without one, of
// session sid.
type reapWait struct {
	cg       string
	sid      int
	deadline time.Time
	pending  int // members seen by the last sweep that it could not reap
	done     chan struct{}
}

// reapGroup reaps the zombies of one tree after its members were killed,
// waiting up to timeout for members still in their exit path. It returns
// how many it saw that it could not reap yet.
//
// Why through the reaper's goroutine: a scan lists every child of this
// process, and when hundreds of trees settle at once (a stop of every
// process) a scan per tree, repeated until its members are gone, is
// quadratic — 500 stops took over a minute. The waits are batched
// instead: each sweep of the children serves every tree waiting then.
func (r *reaperState) reapGroup(cgPath string, sid int, timeout time.Duration) (pending int) {
	w := &reapWait{cg: cgPath, sid: sid, deadline: time.Now().Add(timeout), done: make(chan struct{})}
	r.tabMu.Lock()
	r.waiters = append(r.waiters, w)
	r.tabMu.Unlock()
	r.poke()
	<-w.done
	return w.pending
}

func (r *reaperState) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// loop is the reaper's goroutine: at every SIGCHLD (and every second,
// should a signal ever be coalesced away) it reports watched roots that
// exited and sweeps the children; while trees wait for their zombies it
// sweeps again with a short backoff until each is done or out of time.
func (r *reaperState) loop(sigs <-chan os.Signal) {
	tick := time.NewTicker(time.Second)
	backoff := time.NewTimer(time.Hour)
	coalesce := time.NewTimer(time.Hour)
	delay := time.Duration(0)
	for {
		signalled, peek := false, false
		select {
		case <-sigs:
			signalled, peek = true, true
		case <-tick.C:
			peek = true
		case <-r.kick:
			delay = 0 // a new waiter: sweep at once
		case <-backoff.C:
		case <-r.quit:
			return
		}
		if peek {
			// Watched roots at once: their settling waits on it.
			r.peekRoots()
		}
		if signalled && !r.waiting() {
			// Coalesce bursts of SIGCHLD: one orphan sweep per few ms.
			// Only the sweep waits: a SIGCHLD meanwhile still peeks at
			// the watched roots at once, and a tree that starts waiting
			// ends the pause. (A plain sleep here held back the exit of
			// every watched root whose SIGCHLD came within 5 ms of
			// another child's: the keeper's spawn+wait of /bin/true
			// was 4x os/exec's.)
			coalesce.Reset(cmp.Or(r.pause, 5*time.Millisecond))
		pause:
			for {
				select {
				case <-coalesce.C:
					break pause
				case <-sigs:
					r.peekRoots()
				case <-r.kick:
					coalesce.Stop()
					delay = 0
					break pause
				case <-r.quit:
					return
				}
			}
		}
		if !r.sweep() {
			delay = 0
			continue
		}
		delay = min(max(2*delay, 50*time.Microsecond), 5*time.Millisecond)
		backoff.Reset(delay)
	}
}

func (r *reaperState) waiting() bool {
	r.tabMu.Lock()
	defer r.tabMu.Unlock()
	return len(r.waiters) > 0
}

// sweep is one scan of this process's children: it reaps every zombie
// we own (never a root: its settle reaps it last) and counts, for each
// waiting tree, the members it could not reap yet. Trees with none left,
// or out of time, are released. It reports whether any still wait.
func (r *reaperState) sweep() (waiting bool) {
	r.tabMu.Lock()
	ws := slices.Clone(r.waiters)
	r.tabMu.Unlock()
	if len(ws) == 0 && !anyZombieChild() {
		return false // most wake-ups: nothing to list
	}
	byCg, bySID := map[string][]*reapWait{}, map[int][]*reapWait{}
	for _, w := range ws {
		w.pending = 0
		if w.cg != "" {
			byCg[w.cg] = append(byCg[w.cg], w)
		} else {
			bySID[w.sid] = append(bySID[w.sid], w)
		}
	}
	for _, pid := range children() {
		r.sweepOne(pid, byCg, bySID)
	}
	now := time.Now()
	r.tabMu.Lock()
	defer r.tabMu.Unlock()
	r.waiters = slices.DeleteFunc(r.waiters, func(w *reapWait) bool {
		if slices.Contains(ws, w) && (w.pending == 0 || now.After(w.deadline)) {
			close(w.done)
			return true
		}
		return false
	})
	return len(r.waiters) > 0
}

// sweepOne handles one child for sweep: a member of a waiting tree is
// counted unless it is a zombie that it reaps; any other zombie is reaped
// only when owns proves it ours.
func (r *reaperState) sweepOne(pid int, byCg map[string][]*reapWait, bySID map[int][]*reapWait) {
	if r.isRoot(pid) {
		return
	}
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return
	}
	zombie := dead(st)
	ws := bySID[st.SID]
	var paths map[string]string
	if len(ws) == 0 && (zombie || len(byCg) > 0) {
		// A zombie's cgroup is still readable.
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup"); err == nil {
			paths = cgroups.ParseProcCgroup(b)
		}
		for _, p := range paths {
			for _, w := range byCg[p] {
				if !slices.Contains(ws, w) { // v1: one path in several hierarchies
					ws = append(ws, w)
				}
			}
		}
	}
	switch {
	case len(ws) > 0:
		if !zombie || !r.reap(pid) {
			for _, w := range ws {
				w.pending++
			}
		}
	case zombie && r.owns(paths, st):
		r.reap(pid)
	}
}

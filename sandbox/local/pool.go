package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// Why a pool of cgroups: creating and removing a v2 leaf costs about a
// tenth of a /bin/true spawn (kernfs creates a dozen files per group). A
// leaf that only tracks (no limits) is reusable once its tree is gone and
// reaped, so it goes back to a small pool instead of rmdir. Limited groups
// are always fresh: their counters (OOM kills, peaks) must start at zero.
//
// Pooled leaves are named h<host pid>-<host start>-pool<n>.
const poolMax = 32

var groupPool struct {
	mu   sync.Mutex
	free []*cgroups.Group
	seq  int
}

// newGroup returns the process's cgroup and whether it is pooled.
func (b *Backend) newGroup(id string, lim cgroups.Limits) (*cgroups.Group, bool, error) {
	if lim != (cgroups.Limits{}) || b.cg.V2 == "" {
		g, err := b.cg.NewGroup(groupName(id, 0), lim)
		return g, false, err
	}
	groupPool.mu.Lock()
	if n := len(groupPool.free); n > 0 {
		g := groupPool.free[n-1]
		groupPool.free = groupPool.free[:n-1]
		groupPool.mu.Unlock()
		return g, true, nil
	}
	groupPool.seq++
	name := groupName("", groupPool.seq)
	groupPool.mu.Unlock()
	g, err := b.cg.NewGroup(name, lim)
	if err != nil {
		return nil, false, err
	}
	return g, g.V2Dir != "", nil
}

// releaseGroup returns an empty pooled group to the pool, or removes it.
// empty says the caller already saw the group empty after its root exited.
func releaseGroup(g *cgroups.Group, empty bool) error {
	if !empty {
		pids, err := g.Procs()
		empty = err == nil && len(pids) == 0
	}
	if empty {
		groupPool.mu.Lock()
		if len(groupPool.free) < poolMax {
			groupPool.free = append(groupPool.free, g)
			groupPool.mu.Unlock()
			return nil
		}
		groupPool.mu.Unlock()
	}
	return g.Remove()
}

// hostTag names this host process in its cgroups: "h<pid>-<start>",
// the start time (clock ticks since boot) guarding against PID reuse.
var hostTag = fmt.Sprintf("h%d-%d", os.Getpid(), procfs.StartTime(os.Getpid()))

// groupName is the cgroup name of a process (or, with id "", of a pool
// slot n).
func groupName(id string, n int) string {
	if id == "" {
		return fmt.Sprintf("%s-pool%d", hostTag, n)
	}
	return hostTag + "-" + id
}

// sweepStale kills and removes the cgroups left by host processes that
// are gone (crashed, or killed with SIGKILL): handle-lifetime trees must
// not outlive their host, and before this sweep nothing else would stop
// them. A group whose host is alive (same PID and start time) is left
// alone; so is every name this backend did not make.
func sweepStale(s *cgroups.System) {
	if s == nil {
		return
	}
	dirs := map[string]bool{}
	if s.V2 != "" {
		dirs[filepath.Join(s.V2, cgroups.Parent)] = true
	}
	for _, c := range []string{"memory", "pids"} {
		if d, ok := s.V1[c]; ok {
			dirs[filepath.Join(d, cgroups.Parent)] = true
		}
	}
	// One /proc read per host, not per group: a keeper holding 1,000
	// processes has 1,000 groups in each of up to three hierarchies, and
	// reading its stat 3,000 times was a tenth of a restart (issue 11).
	stale := map[string]bool{}
	for parent := range dirs {
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !staleHostCached(stale, e.Name()) {
				continue
			}
			g := filepath.Join(parent, e.Name())
			_ = os.WriteFile(filepath.Join(g, "cgroup.kill"), []byte("1"), 0)
			if pids, err := cgroups.ReadProcs(filepath.Join(g, "cgroup.procs")); err == nil {
				for _, pid := range pids {
					_ = unix.Kill(pid, unix.SIGKILL) // v1: no cgroup.kill; members of a dead host's tree
				}
			}
			for i := 0; i < 50; i++ {
				if err := unix.Rmdir(g); err == nil || errors.Is(err, unix.ENOENT) {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
	}
}

// staleHostCached is cgroups.HostGone memoized by the name's "h<pid>-<start>"
// prefix (one sweep: a host does not come back within it).
func staleHostCached(memo map[string]bool, name string) bool {
	f := strings.SplitN(name, "-", 3)
	if len(f) != 3 {
		return cgroups.HostGone(name)
	}
	tag := f[0] + "-" + f[1]
	v, ok := memo[tag]
	if !ok {
		v = cgroups.HostGone(name)
		memo[tag] = v
	}
	return v
}

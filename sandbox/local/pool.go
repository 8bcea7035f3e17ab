package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// Why a pool of cgroups: creating and removing a v2 leaf costs about a
// tenth of a /bin/true spawn (kernfs creates a dozen files per group). A
// leaf that only tracks (no limits) is reusable once its tree is gone and
// reaped, so it goes back to a small pool instead of rmdir. Limited groups
// are always fresh: their counters (OOM kills, peaks) must start at zero.
//
// Pooled leaves are named pool-<host pid>-<n>; New removes the ones left
// by host processes that are gone.
const poolMax = 32

var groupPool struct {
	mu   sync.Mutex
	free []*cgroups.Group
	seq  int
}

// newGroup returns the process's cgroup and whether it is pooled.
func (b *Backend) newGroup(id string, lim cgroups.Limits) (*cgroups.Group, bool, error) {
	if lim != (cgroups.Limits{}) || b.cg.V2 == "" {
		g, err := b.cg.NewGroup(id, lim)
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
	name := fmt.Sprintf("pool-%d-%d", os.Getpid(), groupPool.seq)
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

// sweepStalePools removes pooled leaves of host processes that are gone.
func sweepStalePools(s *cgroups.System) {
	if s == nil || s.V2 == "" {
		return
	}
	parent := filepath.Join(s.V2, cgroups.Parent)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "pool-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pidStr); err == nil {
			continue // owner alive (or PID reused: leave it, it is cheap)
		}
		_ = unix.Rmdir(filepath.Join(parent, e.Name())) // fails if in use: fine
		_ = pid
	}
}

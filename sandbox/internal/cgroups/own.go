package cgroups

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

// This file moves a process (the keeper) out of its starter's cgroup into
// a group of its own, so a service manager that kills the starter's whole
// cgroup (systemd's default KillMode=control-group on `systemctl stop` or
// `restart`) does not reach it, nor the processes it holds: the backends
// make their leaves under a process's own cgroup (Parent), so the
// keeper's processes move with it. containerd's shims and Docker's
// cgroupfs driver do the same for the same reason (RFC §16).

// KeeperParent is the group, beside the starter's cgroup, that holds one
// group per keeper.
const KeeperParent = "capsule-host-keepers"

// KeeperGroup is the name of the keeper of directory dir (absolute)
// embedding backend: the backend's name and a hash of the directory, so
// it is the same for every keeper of one directory (the next keeper
// sweeps what a dead one left there) and distinct between directories.
func KeeperGroup(backend, dir string) string {
	h := sha256.Sum256([]byte(dir))
	return fmt.Sprintf("%s-%x", backend, h[:keeperHashBytes])
}

const keeperHashBytes = 6

// isKeeperGroup says whether name has KeeperGroup's shape. Only such
// groups are removeIdle's: an OCI runtime on a unified host makes its
// containers' groups under the parent of its own cgroup, which for a
// keeper's container is KeeperParent, and one made a moment ago is
// empty until its init joins it.
func isKeeperGroup(name string) bool {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || len(name)-i-1 != 2*keeperHashBytes {
		return false
	}
	_, err := hex.DecodeString(name[i+1:])
	return err == nil && strings.ToLower(name[i+1:]) == name[i+1:]
}

// tracking says whether m is a hierarchy a service manager tracks and
// kills a service's processes by: the v2 tree (systemd in unified and
// hybrid mode) or v1's named systemd hierarchy (legacy mode). The v1
// controller hierarchies (memory, pids, cpu, ...) are not: the process
// stays where its starter put it there, so an outer limit (a slice's, a
// container's) still covers it and its processes, and the limit leaves
// keep their place.
func tracking(m Mount) bool { return m.V2 || slices.Contains(m.Controllers, "name=systemd") }

// Placement is one hierarchy's move: the process's cgroup directory
// before (From) and its own group (Dir).
type Placement struct {
	From, Dir string
}

// OwnGroups plans the groups named name for a process whose membership
// (ParseProcCgroup) is member: in every tracking hierarchy it is in,
// <parent of its cgroup>/capsule-host-keepers/<name>, a sibling of its
// cgroup's subtree, so inside the same slice (whose limits still apply)
// and outside the service. A process at its mount's root has no parent
// there: the group is <mount>/capsule-host-keepers/<name>, below it
// (nothing kills a hierarchy's root as a unit).
func OwnGroups(mounts []Mount, member map[string]string, name string) []Placement {
	var out []Placement
	for _, m := range mounts {
		if !tracking(m) {
			continue
		}
		p, ok := memberPath(m, member)
		if !ok {
			continue
		}
		rel, ok := within(m.Root, p)
		if !ok {
			continue
		}
		// The parent of its cgroup; at the mount's root, the root itself.
		pl := Placement{From: filepath.Join(m.Dir, rel), Dir: filepath.Join(m.Dir, filepath.Dir(rel), KeeperParent, name)}
		if !slices.Contains(out, pl) {
			out = append(out, pl)
		}
	}
	return out
}

// MoveOut moves this process into its own groups (OwnGroups, name one
// path element) and returns the moves made. A hierarchy where the move
// fails (not writable: a non-root daemon without delegation) keeps the
// process where it was; the failures are joined in err. Before its own,
// it removes what keepers that are gone left under the same parent
// (removeIdle).
func MoveOut(name string) ([]Placement, error) {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return nil, fmt.Errorf("cgroups: group name %q is not one path element", name)
	}
	mounts, err := Mounts()
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	member := Membership("self")
	if member == nil {
		return nil, errors.New("cgroups: /proc/self/cgroup unreadable")
	}
	var done []Placement
	var errs []error
	for _, pl := range OwnGroups(mounts, member, name) {
		removeIdle(filepath.Dir(pl.Dir), name)
		if err := join(pl.Dir); err != nil {
			_ = unix.Rmdir(pl.Dir) // ours and empty, or someone's: rmdir touches neither
			errs = append(errs, err)
			continue
		}
		done = append(done, pl)
	}
	return done, errors.Join(errs...)
}

// join creates dir and moves this process into it. Another keeper's
// removeIdle may remove dir between the two (it was empty): tried again.
func join(dir string) error {
	var err error
	for range 3 {
		if err = os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroups: create %s: %w", dir, err)
		}
		err = writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(os.Getpid()))
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENODEV) {
			return err
		}
	}
	return err
}

// Leave ends MoveOut's groups when the process is about to exit: it
// moves itself to each group's parent (capsule-host-keepers) and removes
// the group with the groups below it, unless another process sits in it
// (a keeper of the same directory starting). A group that still holds a
// process (a straggler) stays, for the next keeper's removeIdle.
func Leave(moved []Placement) {
	self := os.Getpid()
	mine := func(leaf string) bool {
		pid, _, _ := leafHost(leaf)
		return pid == self || HostGone(leaf)
	}
	for _, pl := range moved {
		if writeFile(filepath.Join(filepath.Dir(pl.Dir), "cgroup.procs"), strconv.Itoa(self)) != nil {
			continue
		}
		if pids, err := ReadProcs(filepath.Join(pl.Dir, "cgroup.procs")); err == nil && len(pids) == 0 {
			removeTreeOf(pl.Dir, mine)
		}
	}
}

// removeIdle removes the keepers' groups under parent, other than keep,
// that no process sits in directly (a live keeper always does): what
// keepers that are gone left. removeTreeOf says why this never reaches a live
// keeper's groups.
func removeIdle(parent, keep string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == keep || !isKeeperGroup(e.Name()) {
			continue
		}
		d := filepath.Join(parent, e.Name())
		if pids, err := ReadProcs(filepath.Join(d, "cgroup.procs")); err != nil || len(pids) > 0 {
			continue
		}
		removeTreeOf(d, HostGone)
	}
}

// removeTreeOf rmdirs d's subgroups, children first, then d, one try
// each. rmdir removes only an empty group (a populated one says EBUSY),
// so nothing running is touched; but an empty group may be a live
// host's pooled leaf between two uses, so a leaf named by a host
// ("h<pid>-<start>-...", the local backend's names) is removed only when
// done(name) says that host is done with it. A host that is gone stays
// gone (its PID and start time do not come back), so a keeper that
// starts meanwhile in the same group never loses a leaf.
func removeTreeOf(d string, done func(leaf string) bool) {
	if _, _, named := leafHost(filepath.Base(d)); named && !done(filepath.Base(d)) {
		return
	}
	ents, err := os.ReadDir(d)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			removeTreeOf(filepath.Join(d, e.Name()), done)
		}
	}
	_ = unix.Rmdir(d)
}

// HostGone reports whether name is "h<pid>-<start>-..." of a host
// process that no longer exists (not this one; the PID gone, or reused by
// a process with another start time).
func HostGone(name string) bool {
	pid, start, ok := leafHost(name)
	if !ok || pid == os.Getpid() {
		return false
	}
	st, err := procfs.ReadStat(pid)
	return err != nil || st.Start != start
}

// leafHost parses a leaf name "h<pid>-<start>-...".
func leafHost(name string) (pid int, start uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, "h")
	if !ok {
		return 0, 0, false
	}
	f := strings.SplitN(rest, "-", 3)
	if len(f) != 3 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, start, true
}

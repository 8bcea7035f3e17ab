// Package cgroups is the small cgroup toolkit the sandbox backends share:
// find the hierarchies (v2 unified, v1 per controller, or both on a hybrid
// machine), create one leaf group per process, apply memory/pids limits
// where a controller exists, list, signal and kill every member, read the
// OOM counter and usage, and remove groups (including leftovers of other
// tools, e.g. runsc's).
//
// Why hand-written and not github.com/containerd/cgroups/v3 (v3.1.2) or
// github.com/opencontainers/cgroups (v0.0.5), both evaluated on a hybrid
// host: neither splits one group across v2 (tracking, cgroup.kill) and v1
// (the memory/pids limits v2 lacks there); opencontainers' fs2 refuses a
// v2 mount other than /sys/fs/cgroup and its hybrid manager makes a leaf in
// every v1 hierarchy; containerd's cgroup2 Stat/Procs/NewManager+Delete
// cost ~100x a cached pread and ~15x a mkdir+rmdir on the spawn path;
// neither gives the CLONE_INTO_CGROUP descriptor, a bounded kill-and-wait,
// or a typed per-controller limit error; and each links logrus, dbus and
// systemd (containerd also ebpf and protobuf) into the host binary.
package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnsupported: the requested controller or operation is not available.
var ErrUnsupported = errors.New("cgroup feature unsupported")

// LimitError is NewGroup's failure to set one controller's limit: the
// controller ("memory", "pids") is what the caller reports as the limit
// that could not be enforced. It wraps ErrUnsupported when no hierarchy
// has the controller, and the write error otherwise.
type LimitError struct {
	Controller string
	Err        error
}

func (e *LimitError) Error() string { return e.Controller + ": " + e.Err.Error() }
func (e *LimitError) Unwrap() error { return e.Err }

// System describes the cgroup hierarchies visible to this process.
type System struct {
	// V2 is the directory of this process's own cgroup in the unified
	// hierarchy ("" when there is no v2 mount).
	V2 string
	// V2Path is that cgroup's path as /proc/<pid>/cgroup prints it ("0::" line).
	V2Path string
	// V2Controllers are the controllers available in V2 (cgroup.controllers).
	V2Controllers map[string]bool
	// V1 maps a v1 controller ("memory", "pids", "cpuacct", ...) to the
	// directory of this process's own cgroup in it.
	V1 map[string]string
	// V1Paths maps a v1 controller to its /proc/<pid>/cgroup path.
	V1Paths map[string]string
}

// Detect reads /proc/self/mountinfo and /proc/self/cgroup.
func Detect() (*System, error) {
	own, err := parseProcCgroup("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: read mountinfo: %w", err)
	}
	s := &System{V1: map[string]string{}, V1Paths: map[string]string{}, V2Controllers: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(mi))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// id parent maj:min root mountpoint opts [optional...] - fstype src superopts
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 > len(f)-0 || len(f) < 5 {
			continue
		}
		root, mnt, fstype, super := unescape(f[3]), unescape(f[4]), f[sep+1], ""
		if sep+3 < len(f) {
			super = f[sep+3]
		}
		switch fstype {
		case "cgroup2":
			p, ok := own[""]
			if !ok || s.V2 != "" {
				continue
			}
			rel, ok := within(root, p)
			if !ok {
				continue
			}
			s.V2 = filepath.Join(mnt, rel)
			s.V2Path = p
		case "cgroup":
			for _, opt := range strings.Split(super, ",") {
				p, ok := own[opt]
				if !ok {
					continue
				}
				if _, dup := s.V1[opt]; dup {
					continue
				}
				rel, ok := within(root, p)
				if !ok {
					continue
				}
				s.V1[opt] = filepath.Join(mnt, rel)
				s.V1Paths[opt] = p
			}
		}
	}
	if s.V2 != "" {
		if b, err := os.ReadFile(filepath.Join(s.V2, "cgroup.controllers")); err == nil {
			for _, c := range strings.Fields(string(b)) {
				s.V2Controllers[c] = true
			}
		}
	}
	return s, nil
}

// within maps a cgroup path p to a path relative to a mount whose root is root.
func within(root, p string) (string, bool) {
	if root == "/" {
		return p, true
	}
	if p == root {
		return "/", true
	}
	if strings.HasPrefix(p, root+"/") {
		return strings.TrimPrefix(p, root), true
	}
	return "", false
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseProcCgroup maps controller name ("" for v2, "name=systemd" kept as
// is) to path.
func parseProcCgroup(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cgroups: read %s: %w", file, err)
	}
	return ParseProcCgroup(b), nil
}

// ParseProcCgroup parses the content of /proc/<pid>/cgroup into controller
// → path ("" is the v2 line).
func ParseProcCgroup(b []byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			m[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			m[c] = parts[2]
		}
	}
	return m
}

// Limits are what a Group can enforce. Zero means none.
type Limits struct {
	MemoryBytes int64
	Pids        int
}

// Group is one process's leaf cgroup: a v2 directory (tracking, kill, cpu
// stats, and limits where the controllers exist) and/or v1 directories for
// the controllers a limit needed.
type Group struct {
	// V2Dir is the leaf in the unified hierarchy ("" if none).
	V2Dir string
	// V1Dirs maps controller → leaf directory for v1 controllers joined.
	V1Dirs map[string]string
	// v2 limit files live in V2Dir when the controller was enabled there.
	v2mem, v2pids bool
	// v2why: why a v2 controller could not be enabled (for the error when
	// v1 cannot help either).
	v2why map[string]error
	// name is the relative name under each parent.
	name string
	fd   int
	// Kept-open descriptors of the files read at every settlement
	// (cgroup.procs, cpu.stat): a pread is cheaper than open+read+close,
	// and pooled groups are read thousands of times. Guarded by mu.
	mu        sync.Mutex
	procsFD   int
	cpuStatFD int
	// uncached: Idle was called; reads open and close their file (a
	// status read of every live process must not leave a descriptor per
	// group behind: it did, one per process in the keeper after a list).
	uncached bool
}

// Parent is the subdirectory under this process's own cgroup in which the
// backends create their leaves.
const Parent = "capsule-host"

// NewGroup creates a leaf named name under <own cgroup>/capsule-host in the
// unified hierarchy (when v2 is mounted and writable) and applies lim: in v2
// when the controller exists there, else in v1. A limit neither can enforce
// is a *LimitError naming it ("memory", "pids") and wrapping ErrUnsupported.
// With no v2 and no limits the group is empty (V2Dir "" and no V1Dirs).
func (s *System) NewGroup(name string, lim Limits) (g *Group, err error) {
	g = &Group{V1Dirs: map[string]string{}, name: name, fd: -1, procsFD: -1, cpuStatFD: -1}
	defer func() {
		if err != nil {
			g.Remove()
			g = nil
		}
	}()
	if err := g.setupV2(s, lim); err != nil {
		return g, err
	}
	if lim.MemoryBytes > 0 && !g.v2mem {
		dir, err := s.v1Leaf("memory", name)
		if err != nil {
			return g, &LimitError{"memory", fmt.Errorf("%w%s", err, g.v2note("memory"))}
		}
		g.V1Dirs["memory"] = dir
		if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
			return g, &LimitError{"memory", err}
		}
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
			// Keep swap out of the budget (memsw >= limit is required).
			_ = writeFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), strconv.FormatInt(lim.MemoryBytes, 10))
		}
	}
	if lim.Pids > 0 && !g.v2pids {
		dir, err := s.v1Leaf("pids", name)
		if err != nil {
			return g, &LimitError{"pids", fmt.Errorf("%w%s", err, g.v2note("pids"))}
		}
		g.V1Dirs["pids"] = dir
		if err := writeFile(filepath.Join(dir, "pids.max"), strconv.Itoa(lim.Pids)); err != nil {
			return g, &LimitError{"pids", err}
		}
	}
	return g, nil
}

// setupV2 creates the v2 leaf and applies the limits v2 can enforce. An
// unwritable hierarchy is not an error: the group then has no v2 leaf.
func (g *Group) setupV2(s *System, lim Limits) error {
	if s.V2 == "" {
		return nil
	}
	parent := filepath.Join(s.V2, Parent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil // not writable: no v2 tracking
	}
	want := []string{}
	if lim.MemoryBytes > 0 && s.V2Controllers["memory"] {
		want = append(want, "memory")
	}
	if lim.Pids > 0 && s.V2Controllers["pids"] {
		want = append(want, "pids")
	}
	enabled, why := enableControllers(s.V2, parent, want)
	g.v2why = why
	dir := filepath.Join(parent, g.name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("cgroups: create %s: %w", dir, err)
	}
	g.V2Dir = dir
	if lim.MemoryBytes > 0 && enabled["memory"] {
		if err := writeFile(filepath.Join(dir, "memory.max"), strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
			return &LimitError{"memory", err}
		}
		// Swap would let the limit be exceeded silently.
		_ = writeFile(filepath.Join(dir, "memory.swap.max"), "0")
		g.v2mem = true
	}
	if lim.Pids > 0 && enabled["pids"] {
		if err := writeFile(filepath.Join(dir, "pids.max"), strconv.Itoa(lim.Pids)); err != nil {
			return &LimitError{"pids", err}
		}
		g.v2pids = true
	}
	return nil
}

func (g *Group) v2note(c string) string {
	if err := g.v2why[c]; err != nil {
		return fmt.Sprintf(" (v2 %s controller present but not enabled: %v)", c, err)
	}
	return ""
}

func (s *System) v1Leaf(ctrl, name string) (string, error) {
	base, ok := s.V1[ctrl]
	if !ok {
		return "", fmt.Errorf("no v2 or v1 %s controller: %w", ctrl, ErrUnsupported)
	}
	parent := filepath.Join(base, Parent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create %s: %v: %w", parent, err, ErrUnsupported)
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %v: %w", dir, err, ErrUnsupported)
	}
	return dir, nil
}

// enableControllers tries to enable want in parent's subtree (and, as v2
// requires, in every ancestor up to root's own cgroup). It returns what is
// enabled for children of parent. Failure (e.g. the "no internal
// processes" rule on the host's own cgroup) just leaves a controller out.
func enableControllers(own, parent string, want []string) (map[string]bool, map[string]error) {
	got, why := map[string]bool{}, map[string]error{}
	for _, c := range want {
		ok := true
		for _, d := range []string{own, parent} {
			if hasController(d, c) {
				continue
			}
			if err := writeFile(filepath.Join(d, "cgroup.subtree_control"), "+"+c); err != nil {
				// Typically EBUSY: the host runs in d itself, and v2 allows
				// controllers only for children of a cgroup without
				// processes. Run the host in a leaf of a delegated cgroup.
				why[c] = err
				ok = false
				break
			}
		}
		got[c] = ok && hasController(parent, c)
	}
	return got, why
}

func hasController(dir, c string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return false
	}
	for _, x := range strings.Fields(string(b)) {
		if x == c {
			return true
		}
	}
	return false
}

func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroups: open %s: %w", path, err)
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroups: write %q to %s: %w", v, path, err)
	}
	return nil
}

// FD opens the v2 leaf for SysProcAttr.CgroupFD (clone3 CLONE_INTO_CGROUP),
// so the child is born inside its group: nothing it forks can escape the
// group between fork and a later join. -1 without a v2 leaf. The Group
// owns the descriptor (closed by Remove or CloseFD).
func (g *Group) FD() (int, error) {
	if g.V2Dir == "" {
		return -1, nil
	}
	if g.fd >= 0 {
		return g.fd, nil
	}
	fd, err := unix.Open(g.V2Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cgroups: open %s: %w", g.V2Dir, err)
	}
	g.fd = fd
	return fd, nil
}

// CloseFD closes the descriptor FD returned.
func (g *Group) CloseFD() {
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
}

// JoinFiles are the cgroup.procs files a child must write its PID to
// (the v1 leaves; v2 is joined at clone time).
func (g *Group) JoinFiles() []string {
	var out []string
	for _, d := range g.V1Dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// Tracking reports whether the group can enumerate the process tree.
func (g *Group) Tracking() bool { return g.V2Dir != "" || len(g.V1Dirs) > 0 }

// procsDir is the directory whose cgroup.procs lists the whole tree.
func (g *Group) procsDir() string {
	if g.V2Dir != "" {
		return g.V2Dir
	}
	for _, c := range []string{"pids", "memory"} {
		if d, ok := g.V1Dirs[c]; ok {
			return d
		}
	}
	return ""
}

// Procs lists the live members (zombies are not listed).
func (g *Group) Procs() ([]int, error) {
	d := g.procsDir()
	if d == "" {
		return nil, ErrUnsupported
	}
	b, err := g.pread(&g.procsFD, filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	return parseProcs(b), nil
}

// pread reads a whole small file through a cached descriptor (a fresh
// one, closed after the read, once the group is Idle).
func (g *Group) pread(fd *int, path string) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if *fd < 0 {
		f, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroups: open %s: %w", path, err)
		}
		if g.uncached {
			defer unix.Close(f)
			return preadAll(f, path)
		}
		*fd = f
	}
	return preadAll(*fd, path)
}

// preadAll reads the whole file fd from offset 0.
func preadAll(fd int, path string) ([]byte, error) {
	buf := make([]byte, 4096)
	var out []byte
	for off := int64(0); ; {
		n, err := unix.Pread(fd, buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroups: read %s: %w", path, err)
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
		off += int64(n)
	}
}

// Idle closes every descriptor the group holds (the directory's and the
// cached files') and keeps none from then on: a later read opens and
// closes its file. For a holder of many long-lived groups (the keeper),
// where a descriptor per group would be paid for the whole life of its
// process.
func (g *Group) Idle() {
	g.CloseFD()
	g.mu.Lock()
	g.uncached = true
	g.mu.Unlock()
	g.closeFiles()
}

func (g *Group) closeFiles() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, fd := range []*int{&g.procsFD, &g.cpuStatFD} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

func parseProcs(b []byte) []int {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// ReadProcs parses a cgroup.procs file.
func ReadProcs(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	return parseProcs(b), nil
}

// Signal sends sig to every live member through a pidfd opened while the
// PID is listed in the group, and re-checks membership after opening it, so
// a PID reused between listing and signalling is never hit.
func (g *Group) Signal(sig syscall.Signal) error {
	d := g.procsDir()
	if d == "" {
		return ErrUnsupported
	}
	pids, err := g.Procs()
	if err != nil {
		return err
	}
	for _, pid := range pids {
		signalIfMember(pid, d, sig)
	}
	return nil
}

func signalIfMember(pid int, dir string, sig syscall.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	// The pidfd pins the identity; confirm it is still our member.
	pids, err := ReadProcs(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, p := range pids {
		if p == pid {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
			return
		}
	}
}

// Kill SIGKILLs every member, escaped descendants included, and waits up
// to timeout for the group to be empty. v2 uses cgroup.kill (atomic, also
// catches members forked during the kill); otherwise members are signalled
// in rounds until none is left.
func (g *Group) Kill(timeout time.Duration) error {
	d := g.procsDir()
	if d == "" {
		return ErrUnsupported
	}
	deadline := time.Now().Add(timeout)
	if pids, err := g.Procs(); err == nil && len(pids) == 0 {
		return nil // the common case at settlement: nothing left
	}
	if g.V2Dir != "" {
		if err := writeFile(filepath.Join(g.V2Dir, "cgroup.kill"), "1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for delay := 100 * time.Microsecond; ; delay = min(delay*2, 10*time.Millisecond) {
		pids, err := g.Procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups: %d members of %s survive SIGKILL after %v", len(pids), d, timeout)
		}
		for _, pid := range pids {
			signalIfMember(pid, d, syscall.SIGKILL)
		}
		time.Sleep(delay)
	}
}

// WaitEmpty waits up to timeout until the group has no live member.
func (g *Group) WaitEmpty(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for delay := 100 * time.Microsecond; ; delay = min(delay*2, 10*time.Millisecond) {
		pids, err := g.Procs()
		if err != nil || len(pids) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
}

// OOMKills is the number of OOM kills in the group (v2 memory.events
// oom_kill, v1 memory.oom_control oom_kill or, on old kernels, failcnt).
// ok is false when no memory accounting applies to the group.
func (g *Group) OOMKills() (n int64, ok bool) {
	if g.v2mem {
		if v, ok := keyed(filepath.Join(g.V2Dir, "memory.events"), "oom_kill"); ok {
			return v, true
		}
	}
	if d, has := g.V1Dirs["memory"]; has {
		if v, ok := keyed(filepath.Join(d, "memory.oom_control"), "oom_kill"); ok {
			return v, true
		}
		if v, ok := single(filepath.Join(d, "memory.failcnt")); ok {
			return v, true
		}
	}
	return 0, false
}

// CPUTime is the group's total CPU time, if accounted.
func (g *Group) CPUTime() (time.Duration, bool) {
	if g.V2Dir != "" {
		if b, err := g.pread(&g.cpuStatFD, filepath.Join(g.V2Dir, "cpu.stat")); err == nil {
			if v, ok := keyedIn(b, "usage_usec"); ok {
				return time.Duration(v) * time.Microsecond, true
			}
		}
	}
	if d, has := g.V1Dirs["cpuacct"]; has {
		if v, ok := single(filepath.Join(d, "cpuacct.usage")); ok {
			return time.Duration(v), true
		}
	}
	return 0, false
}

// MemoryPeak is the group's peak memory use, if accounted.
func (g *Group) MemoryPeak() (int64, bool) {
	if g.v2mem {
		if v, ok := single(filepath.Join(g.V2Dir, "memory.peak")); ok {
			return v, true
		}
	}
	if d, has := g.V1Dirs["memory"]; has {
		if v, ok := single(filepath.Join(d, "memory.max_usage_in_bytes")); ok {
			return v, true
		}
	}
	return 0, false
}

// Remove removes every leaf of the group (they must be empty of live
// members). Idempotent.
func (g *Group) Remove() error {
	g.CloseFD()
	g.closeFiles()
	var errs []error
	if g.V2Dir != "" {
		if err := rmdir(g.V2Dir); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range g.V1Dirs {
		if err := rmdir(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rmdir removes a cgroup directory, retrying briefly: the kernel reports
// EBUSY for a moment after the last member exits.
func rmdir(d string) error {
	var err error
	for i := 0; i < 50; i++ {
		err = unix.Rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(time.Millisecond * time.Duration(1+i))
	}
	return fmt.Errorf("cgroups: rmdir %s: %w", d, err)
}

// RemoveEverywhere removes the cgroup rel (a path relative to each
// hierarchy's mount, e.g. "runsc-1234" or "capsule-host/abcd") from the
// v2 hierarchy and every v1 controller, children first. Only empty
// groups can be removed; the first failure is reported after trying all.
// Missing groups are fine. For the OCI backend's leftover cleanup.
func (s *System) RemoveEverywhere(rel string) error {
	rel = filepath.Clean("/" + rel)
	if rel == "/" {
		return fmt.Errorf("cgroups: refusing to remove a hierarchy root")
	}
	var errs []error
	roots := []string{}
	if s.V2 != "" {
		roots = append(roots, mountOf(s.V2, s.V2Path))
	}
	for c, d := range s.V1 {
		roots = append(roots, mountOf(d, s.V1Paths[c]))
	}
	seen := map[string]bool{}
	for _, r := range roots {
		if seen[r] {
			continue
		}
		seen[r] = true
		if err := removeTree(filepath.Join(r, rel)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mountOf strips the process's own cgroup path from its directory.
func mountOf(dir, own string) string {
	if own == "/" || own == "" {
		return dir
	}
	return strings.TrimSuffix(dir, own)
}

func removeTree(d string) error {
	ents, err := os.ReadDir(d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(filepath.Join(d, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := rmdir(d); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func keyed(file, key string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	return keyedIn(b, key)
}

func keyedIn(b []byte, key string) (int64, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseInt(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func single(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// Name is the leaf's name under each hierarchy's capsule-host parent.
func (g *Group) Name() string { return g.name }

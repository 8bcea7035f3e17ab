package oci

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// cgroupMount is one cgroup hierarchy: a v1 controller set or the v2 tree.
type cgroupMount struct {
	dir         string
	controllers []string // empty for v2
	v2          bool
}

// cgroupMounts lists the cgroup hierarchies from /proc/self/mountinfo.
func cgroupMounts() []cgroupMount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch qf[0] {
		case "cgroup2":
			out = append(out, cgroupMount{dir: pf[4], v2: true})
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(qf[2], ",") {
				switch {
				case o == "rw" || o == "ro" || strings.HasPrefix(o, "release_agent") || o == "clone_children" || o == "xattr" || o == "noprefix":
				default:
					ctrls = append(ctrls, o)
				}
			}
			out = append(out, cgroupMount{dir: pf[4], controllers: ctrls})
		}
	}
	return out
}

// procCgroups parses /proc/<pid>/cgroup into controller-set → path; the
// v2 entry has key "".
func procCgroups(pid string) map[string]string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out
}

// cgroupDirs maps a process's cgroup membership (from procCgroups) to the
// directories of every hierarchy, joined with rel ("" for the exact
// membership). Only hierarchies that are mounted are returned.
func cgroupDirs(member map[string]string, rel string) []string {
	return cgroupDirsIn(cgroupMounts(), member, rel)
}

// cgroupDirsIn is cgroupDirs over mounts already parsed: the mount table
// is long on a busy host (a few ms to parse), and a monitor parses it
// once, while it idles as a spare.
func cgroupDirsIn(mounts []cgroupMount, member map[string]string, rel string) []string {
	var out []string
	for _, m := range mounts {
		var p string
		var ok bool
		if m.v2 {
			p, ok = member[""]
		} else {
			p, ok = member[strings.Join(m.controllers, ",")]
			if !ok {
				for k, v := range member {
					if k != "" && sameSet(strings.Split(k, ","), m.controllers) {
						p, ok = v, true
					}
				}
			}
		}
		if !ok {
			continue
		}
		out = append(out, filepath.Join(m.dir, p, rel))
	}
	sort.Strings(out)
	return dedupe(out)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

func dedupe(in []string) []string {
	out := in[:0]
	for i, s := range in {
		if i == 0 || s != in[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// memoryCgroupDirs returns the directories a container whose cgroupsPath
// is rel will live in, resolved under this process's own cgroups (runc's
// rule for a relative cgroupsPath). oomKills reads whichever of them has
// memory accounting.
func memoryCgroupDirs(rel string) []string {
	return cgroupDirs(procCgroups("self"), rel)
}

// oomKills is the number of OOM kills recorded in any of dirs (v1
// memory.oom_control "oom_kill", v2 memory.events "oom_kill"); 0 if none
// is readable.
func oomKills(dirs []string) int64 {
	var n int64
	for _, d := range dirs {
		for _, f := range []string{"memory.oom_control", "memory.events"} {
			b, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(l, " "); ok && k == "oom_kill" {
					if x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
						n += x
					}
				}
			}
		}
	}
	return n
}

// ownedDirs reports whether every dir is a container cgroup named cid.
func ownedDirs(dirs []string, cid string) bool {
	for _, d := range dirs {
		if filepath.Base(d) != cid {
			return false
		}
	}
	return true
}

// removeCgroupDirs removes leftover container cgroups. rmdir only succeeds
// on an empty, unpopulated cgroup, so it can never disturb a live one.
func removeCgroupDirs(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, &os.PathError{Op: "rmdir", Path: d, Err: err})
		}
	}
	return errors.Join(errs...)
}

// sweepRunscLeaks removes empty runsc-<n> cgroups that runsc leaves in
// every v1 controller when a start fails. Only empty ones go (rmdir).
func sweepRunscLeaks() {
	for _, d := range cgroupDirs(procCgroups("self"), "") {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "runsc-") {
				_ = syscall.Rmdir(filepath.Join(d, e.Name()))
			}
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// cgroupStats is stats.json: what the container's cgroups accounted.
type cgroupStats struct {
	CPUNS      *int64 `json:"cpu_ns,omitempty"`
	MemoryPeak *int64 `json:"memory_peak,omitempty"`
}

func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// readCgroupStats reads CPU time (v1 cpuacct.usage, v2 cpu.stat
// usage_usec) and memory peak (v1 memory.max_usage_in_bytes, v2
// memory.peak) from whichever of dirs has them; unknown stays nil.
func readCgroupStats(dirs []string) cgroupStats {
	var cs cgroupStats
	for _, d := range dirs {
		if v, ok := readInt(filepath.Join(d, "cpuacct.usage")); ok && cs.CPUNS == nil {
			cs.CPUNS = &v
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpu.stat")); err == nil && cs.CPUNS == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(l, " "); ok && k == "usage_usec" {
					if x, err := strconv.ParseInt(v, 10, 64); err == nil {
						x *= 1000
						cs.CPUNS = &x
					}
				}
			}
		}
		for _, f := range []string{"memory.max_usage_in_bytes", "memory.peak"} {
			if v, ok := readInt(filepath.Join(d, f)); ok && cs.MemoryPeak == nil {
				cs.MemoryPeak = &v
			}
		}
	}
	return cs
}

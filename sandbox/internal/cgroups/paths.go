package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// This file is the path-level half of the toolkit, for a backend whose
// cgroups another program creates (the OCI runtimes): which directories
// a process's cgroups are in every mounted hierarchy, what they account,
// and how to remove them. Group is the half for the cgroups a backend
// creates itself.

// Mount is one cgroup hierarchy as mountinfo lists it: the v2 tree, or
// one v1 hierarchy with its controller set.
type Mount struct {
	// Dir is the mount point.
	Dir string
	// Root is the hierarchy path mounted at Dir: "/" unless the mount is
	// a bind of a subtree or made inside a cgroup namespace.
	Root string
	// V2: the unified hierarchy.
	V2 bool
	// Controllers of a v1 hierarchy ("cpu", "cpuacct", "name=systemd",
	// ...), as /proc/<pid>/cgroup names them; empty for v2.
	Controllers []string
}

// Mounts lists the cgroup hierarchies of /proc/self/mountinfo. The table
// is long on a busy host (a few ms to parse): a caller that resolves
// many paths parses it once.
func Mounts() ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return ParseMounts(b), nil
}

// v1Options are the superblock options of a v1 cgroup mount that are not
// controllers.
var v1Options = map[string]bool{"rw": true, "ro": true, "clone_children": true, "xattr": true, "noprefix": true, "none": true, "cpuset_v2_mode": true}

// ParseMounts lists the cgroup hierarchies in the content of a mountinfo
// file (proc(5)): "id parent maj:min root mountpoint opts [optional...] -
// fstype source superopts".
func ParseMounts(mountinfo []byte) []Mount {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 {
			continue
		}
		m := Mount{Dir: unescape(pf[4]), Root: unescape(pf[3])}
		switch qf[0] {
		case "cgroup2":
			m.V2 = true
		case "cgroup":
			if len(qf) < 3 {
				continue
			}
			for _, o := range strings.Split(qf[2], ",") {
				if o != "" && !v1Options[o] && !strings.HasPrefix(o, "release_agent=") {
					m.Controllers = append(m.Controllers, o)
				}
			}
			if len(m.Controllers) == 0 {
				continue
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// Dirs maps a process's membership (ParseProcCgroup of its
// /proc/<pid>/cgroup) to its cgroup directory in every mounted hierarchy
// it is in, each joined with rel ("" for the membership itself, or a
// relative path below it, as the runtimes resolve a relative
// cgroupsPath). Hierarchies whose mount does not reach the process's
// cgroup are left out. The result is sorted, without duplicates (one
// hierarchy may be mounted twice).
func Dirs(mounts []Mount, member map[string]string, rel string) []string {
	var out []string
	for _, m := range mounts {
		p, ok := memberPath(m, member)
		if !ok {
			continue
		}
		r, ok := within(m.Root, p)
		if !ok {
			continue
		}
		out = append(out, filepath.Join(m.Dir, r, rel))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// memberPath is the process's path in hierarchy m.
func memberPath(m Mount, member map[string]string) (string, bool) {
	if m.V2 {
		p, ok := member[""]
		return p, ok
	}
	for _, c := range m.Controllers {
		if p, ok := member[c]; ok {
			return p, true
		}
	}
	return "", false
}

// Membership is ParseProcCgroup of /proc/<pid>/cgroup ("self" for this
// process); nil if the process is gone.
func Membership(pid string) map[string]string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		return nil
	}
	return ParseProcCgroup(b)
}

// ProcDirs is Dirs for the process pid ("self" for this one). A process
// that is gone gives nil.
func ProcDirs(mounts []Mount, pid, rel string) []string {
	if m := Membership(pid); m != nil {
		return Dirs(mounts, m, rel)
	}
	return nil
}

// SelfDirs is ProcDirs of this process over a fresh mount table (nil if
// it cannot be read).
func SelfDirs(rel string) []string {
	mounts, err := Mounts()
	if err != nil {
		return nil
	}
	return ProcDirs(mounts, "self", rel)
}

// OOMKillsIn is the number of OOM kills recorded in dirs (v1
// memory.oom_control and v2 memory.events, key oom_kill), summed; 0 if
// none is readable. Only the memory hierarchy's directory has the files,
// so passing every hierarchy's is fine.
func OOMKillsIn(dirs []string) int64 {
	var n int64
	for _, d := range dirs {
		for _, f := range []string{"memory.oom_control", "memory.events"} {
			if v, ok := keyed(filepath.Join(d, f), "oom_kill"); ok {
				n += v
			}
		}
	}
	return n
}

// Usage is what a set of cgroup directories accounted; nil is unknown.
type Usage struct {
	CPUNS      *int64 // v1 cpuacct.usage, v2 cpu.stat usage_usec
	MemoryPeak *int64 // v1 memory.max_usage_in_bytes, v2 memory.peak
}

// usageFiles are where each figure of Usage is, v1 first; key "" is a
// file holding one number.
var usageFiles = []struct {
	cpu       bool // else memory peak
	file, key string
	nsPerUnit int64
}{
	{true, "cpuacct.usage", "", 1},
	{true, "cpu.stat", "usage_usec", 1000},
	{false, "memory.max_usage_in_bytes", "", 1},
	{false, "memory.peak", "", 1},
}

// UsageIn reads Usage from whichever of dirs has each figure (the first
// in dirs' order).
func UsageIn(dirs []string) Usage {
	var u Usage
	for _, d := range dirs {
		for _, f := range usageFiles {
			dst := &u.MemoryPeak
			if f.cpu {
				dst = &u.CPUNS
			}
			if *dst != nil {
				continue
			}
			p := filepath.Join(d, f.file)
			v, ok := single(p)
			if f.key != "" {
				v, ok = keyed(p, f.key)
			}
			if ok {
				v *= f.nsPerUnit
				*dst = &v
			}
		}
	}
	return u
}

// RemoveDirs removes cgroup directories, once each: rmdir succeeds only
// on an empty cgroup, so it can never disturb a live one. Missing ones
// are fine; the failures are joined.
func RemoveDirs(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, &os.PathError{Op: "rmdir", Path: d, Err: err})
		}
	}
	return errors.Join(errs...)
}

// RemoveEmptyChildren removes the empty child cgroups of dirs whose name
// starts with prefix (e.g. the runsc-<n> groups runsc leaves behind when
// a start fails). Best effort: a populated or vanished one is skipped.
func RemoveEmptyChildren(dirs []string, prefix string) {
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				_ = syscall.Rmdir(filepath.Join(d, e.Name()))
			}
		}
	}
}

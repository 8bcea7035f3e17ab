package oci

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/capsule-host/capsule-host/sandbox"
)

// specInput is everything config.json is built from: the operator's
// profile, the seam's spec, and facts the backend decided.
type specInput struct {
	profile  Profile
	proc     sandbox.ProcessSpec
	limits   sandbox.Limits // already tightened by the profile
	cgroup   string         // relative cgroupsPath
	rootless bool
	hostUID  int
	hostGID  int
	swap     bool   // the memory controller accounts swap
	init     string // host path of capsule-oci-init, or ""
}

// runc's own defaults (`runc spec`): proc and sys entries a process has
// no business reading or writing.
var (
	defaultMasked = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
		"/proc/sched_debug", "/sys/firmware", "/proc/scsi",
	}
	defaultReadonly = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// containerCwd maps the host cwd (confined to the workspace by the layer
// above) to its path inside the container.
func containerCwd(p Profile, workspace, cwd string) (string, error) {
	rel, err := filepath.Rel(workspace, cwd)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: cwd %q is outside the workspace %q", sandbox.ErrBoundaryEscape, cwd, workspace)
	}
	return filepath.Join(p.workspaceDir(), rel), nil
}

// buildSpec is config.json: runc's defaults hardened (read-only root,
// no capabilities beyond the profile's, no new privileges, a seccomp
// deny-list, private namespaces), then the profile's binds and masks, the
// network, the user namespace and the limits.
func buildSpec(in specInput) (*specs.Spec, error) {
	cwd, err := containerCwd(in.profile, in.proc.Isolation.Workspace, in.proc.Cwd)
	if err != nil {
		return nil, err
	}
	s := baseSpec(in, cwd)
	if in.init != "" {
		wrapInit(s, in.init)
	}
	addTerminal(s, in.proc.Terminal)
	addBinds(s, in.profile, in.proc.Isolation.Workspace)
	addNetwork(s, in.profile.network() == NetworkHost && in.proc.Isolation.Network)
	addUserNS(s, in)
	addLimits(s, in)
	return s, nil
}

// baseSpec is the spec every container gets.
func baseSpec(in specInput, cwd string) *specs.Spec {
	p, ps := in.profile, in.proc
	caps := append([]string(nil), p.Capabilities...)
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: "capsule",
		Root:     &specs.Root{Path: p.Rootfs, Readonly: true},
		Process: &specs.Process{
			Terminal: false,
			User:     specs.User{UID: p.UID, GID: p.GID},
			Args:     append([]string(nil), ps.Argv...),
			Env:      mergeEnv(ps.Env, p.Env),
			Cwd:      cwd,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
				// Inheritable and ambient stay empty: an exec'd program
				// never gains what its parent did not explicitly keep.
			},
			NoNewPrivileges: true,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=65536k"}},
			{Destination: p.workspaceDir(), Type: "bind", Source: ps.Isolation.Workspace, Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.CgroupNamespace},
			},
			CgroupsPath:   in.cgroup,
			MaskedPaths:   append(append([]string(nil), defaultMasked...), p.MaskedPaths...),
			ReadonlyPaths: append(append([]string(nil), defaultReadonly...), p.ReadonlyPaths...),
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
			Seccomp: defaultSeccomp(),
		},
	}
}

// wrapInit makes capsule-oci-init (host path init) pid 1, with the
// spec's argv as its child.
func wrapInit(s *specs.Spec, init string) {
	// /dev is the container's own tmpfs, so the mount point can be
	// created even though the root is read-only.
	s.Mounts = append(s.Mounts, specs.Mount{Destination: initMount, Type: "bind", Source: init, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	pre := []string{initMount, initFlag}
	if !hasKey(s.Process.Env, "HOME") {
		pre = append(pre, "-u", "HOME")
	}
	s.Process.Args = append(append(pre, "--"), s.Process.Args...)
}

// addBinds adds the profile's read-only binds, then its masks as mounts
// of their own, after the binds they may fall in: runsc ignores
// linux.maskedPaths (measured: TestEscapeMaskedSecret/runsc read the
// secret), and a mount is honoured by every runtime.
func addBinds(s *specs.Spec, p Profile, workspace string) {
	for _, b := range p.ReadOnlyBinds {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: b.Destination, Type: "bind", Source: b.Source, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	for _, m := range p.MaskedPaths {
		hp, ok := hostPathFor(p, workspace, m)
		if !ok {
			continue
		}
		fi, err := os.Stat(hp)
		switch {
		case err != nil:
			continue // nothing there to hide
		case fi.IsDir():
			s.Mounts = append(s.Mounts, specs.Mount{Destination: m, Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "mode=000", "size=4k"}})
		default:
			s.Mounts = append(s.Mounts, specs.Mount{Destination: m, Type: "bind", Source: "/dev/null", Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		}
	}
}

// addNetwork gives the container a private network namespace unless it
// shares the host's, and the /sys that goes with either.
func addNetwork(s *specs.Spec, hostNet bool) {
	if !hostNet {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
		// A private network namespace may mount its own sysfs.
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}})
		return
	}
	// sysfs cannot be mounted afresh in the host's network namespace
	// from a user namespace; bind the host's read-only instead.
	s.Mounts = append(s.Mounts, specs.Mount{Destination: "/sys", Type: "none", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}})
}

// addUserNS maps container root: rootless, onto the invoking user; else
// onto the profile's unprivileged range, if it has one.
func addUserNS(s *specs.Spec, in specInput) {
	switch {
	case in.rootless:
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(in.hostUID), Size: 1}}
		s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(in.hostGID), Size: 1}}
		// devpts in a rootless user namespace cannot take gid/mode the
		// host did not map; mqueue and sysfs likewise.
		s.Mounts = rootlessMounts(s.Mounts)
	case in.profile.UserNS != nil:
		m := in.profile.UserNS
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.HostUID, Size: m.Size}}
		s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.HostGID, Size: m.Size}}
	}
}

// addLimits sets the cgroup limits and rlimits.
func addLimits(s *specs.Spec, in specInput) {
	lim := in.limits
	if lim.MemoryBytes > 0 {
		m := lim.MemoryBytes
		s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &m}
		if in.swap {
			// memory+swap == memory: the limit cannot be dodged by swapping.
			sw := m
			s.Linux.Resources.Memory.Swap = &sw
		}
	}
	if lim.Pids > 0 {
		n := int64(lim.Pids)
		if in.init != "" {
			n++ // the init is ours, not the caller's budget
		}
		s.Linux.Resources.Pids = &specs.LinuxPids{Limit: &n}
	}
	if p := in.profile; p.CPUs > 0 {
		period := uint64(100000)
		quota := int64(math.Ceil(p.CPUs * float64(period)))
		s.Linux.Resources.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if lim.OpenFiles > 0 {
		n := uint64(lim.OpenFiles)
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: n, Soft: n})
	}
	if lim.CPUTime > 0 {
		// Soft: SIGXCPU; hard one second later: SIGKILL, for programs
		// that catch or ignore SIGXCPU (as the local backend does).
		sec := uint64(math.Ceil(lim.CPUTime.Seconds()))
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_CPU", Hard: sec + 1, Soft: sec})
	}
}

// hostPathFor maps a container path to the host path behind it: the
// deepest read-only bind or the workspace that contains it, else the
// rootfs.
func hostPathFor(p Profile, workspace, cpath string) (string, bool) {
	best, bestLen := "", -1
	try := func(dest, src string) {
		if cpath == dest || strings.HasPrefix(cpath, dest+"/") {
			if len(dest) > bestLen {
				best, bestLen = filepath.Join(src, strings.TrimPrefix(cpath, dest)), len(dest)
			}
		}
	}
	for _, b := range p.ReadOnlyBinds {
		try(b.Destination, b.Source)
	}
	try(p.workspaceDir(), workspace)
	if bestLen >= 0 {
		return best, true
	}
	return filepath.Join(p.Rootfs, cpath), true
}

func rootlessMounts(in []specs.Mount) []specs.Mount {
	out := in[:0]
	for _, m := range in {
		switch m.Destination {
		case "/dev/mqueue":
			continue
		case "/dev/pts":
			m.Options = []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}
		case "/sys":
			m = specs.Mount{Destination: "/sys", Type: "none", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}}
		}
		out = append(out, m)
	}
	return out
}

func hasKey(env []string, key string) bool {
	for _, e := range env {
		if k, _, _ := strings.Cut(e, "="); k == key {
			return true
		}
	}
	return false
}

// mergeEnv returns spec entries overridden by profile entries of the same
// key: the operator's settings win over a guest's.
func mergeEnv(spec, profile []string) []string {
	keys := map[string]bool{}
	for _, e := range profile {
		k, _, _ := strings.Cut(e, "=")
		keys[k] = true
	}
	out := make([]string, 0, len(spec)+len(profile))
	for _, e := range spec {
		k, _, _ := strings.Cut(e, "=")
		if !keys[k] {
			out = append(out, e)
		}
	}
	return append(out, profile...)
}

// Clone flags the seccomp profile filters on.
const (
	cloneNewNS   = 0x00020000
	cloneNewUser = 0x10000000
)

// defaultSeccomp is a deny-list: everything is allowed except syscalls
// that reach kernel attack surface or host state no capsule needs (keys,
// tracing, mounts, BPF, perf, modules, swap, reboot, namespace entry and
// creation of user or mount namespaces, handle-based opens, userfaultfd).
// They fail with EPERM so programs see an ordinary permission error.
// clone3 fails with ENOSYS because its flags live in memory a filter
// cannot read; libc then falls back to clone, whose flags are filtered.
func defaultSeccomp() *specs.LinuxSeccomp {
	eperm := uint(1)
	enosys := uint(38)
	deny := []string{
		"keyctl", "add_key", "request_key",
		"ptrace", "process_vm_readv", "process_vm_writev",
		"mount", "umount", "umount2", "pivot_root", "chroot",
		"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
		"bpf", "perf_event_open",
		"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"swapon", "swapoff", "reboot", "acct", "settimeofday", "clock_settime", "adjtimex",
		"setns", "open_by_handle_at", "name_to_handle_at", "userfaultfd",
		"iopl", "ioperm", "lookup_dcookie", "quotactl", "vhangup", "syslog",
	}
	masked := func(name string, flag uint64) specs.LinuxSyscall {
		return specs.LinuxSyscall{
			Names: []string{name}, Action: specs.ActErrno, ErrnoRet: &eperm,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: flag, ValueTwo: flag, Op: specs.OpMaskedEqual}},
		}
	}
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
		Syscalls: []specs.LinuxSyscall{
			{Names: deny, Action: specs.ActErrno, ErrnoRet: &eperm},
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
			masked("unshare", cloneNewUser),
			masked("unshare", cloneNewNS),
			masked("clone", cloneNewUser),
			masked("clone", cloneNewNS),
		},
	}
}

// swapAccounted reports whether the v1 memory controller accounts swap
// (memsw); runc refuses a swap limit it cannot set.
func swapAccounted() bool {
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	return err == nil
}

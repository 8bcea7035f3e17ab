package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/capsule-host/capsule-host/sandbox"
)

// Profile errors. The first two are the seam's classes (sandbox/policy.go),
// so a refusal at Start and one at manifest load are the same error for
// errors.Is; both wrap sandbox.ErrInvalidSpec.
var (
	// ErrUnknownProfile: a manifest or spec names a profile the host
	// config does not declare.
	ErrUnknownProfile = sandbox.ErrUnknownProfile
	// ErrWidens: a manifest or spec asks for more than its profile allows
	// (a higher limit, the network on a profile without it).
	ErrWidens = sandbox.ErrWidens
	// ErrBadProfile: the operator's profile itself is invalid.
	ErrBadProfile = errors.New("invalid launch profile")
)

// NetworkMode is a profile's network.
type NetworkMode string

const (
	// NetworkNone (the default): a private network namespace. The runtime
	// brings up its loopback, so a process can talk to itself on
	// 127.0.0.1 but reaches nothing of the host, the host's loopback
	// included.
	NetworkNone NetworkMode = "none"
	// NetworkLoopback is NetworkNone spelled for what it gives: runc and
	// runsc both give a private namespace a loopback interface.
	NetworkLoopback NetworkMode = "loopback"
	// NetworkHost shares the host's network namespace, and only for a
	// process whose spec has Isolation.Network (the manifest granted it
	// and the host allowed it); others still get NetworkNone.
	NetworkHost NetworkMode = "host"
)

// Bind is an operator-chosen read-only bind mount.
type Bind struct {
	// Source is an absolute host path.
	Source string
	// Destination is an absolute path inside the container.
	Destination string
}

// IDMap maps the container's root (and Size-1 more ids) onto unprivileged
// host ids, so that container root is not host root.
type IDMap struct {
	HostUID, HostGID uint32
	// Size is how many ids are mapped (>= 1; 65536 gives a full range).
	Size uint32
}

// Profile is an approved launch profile, declared by the operator in the
// host config. The guest never supplies OCI JSON, runtime flags, mounts,
// capabilities or host paths: the backend writes config.json from the
// profile plus the ProcessSpec, and nothing else.
type Profile struct {
	// Runtime names an entry of Options.Runtimes ("" means "runc").
	Runtime string
	// Rootfs is the absolute host directory used as the container's root.
	// It is always mounted read-only, so one rootfs serves any number of
	// containers and none can tamper with another's.
	Rootfs string
	// WorkspaceDir is where spec.Isolation.Workspace is bound read-write
	// inside the container (default "/workspace").
	WorkspaceDir string
	// ReadOnlyBinds are extra read-only binds chosen by the operator.
	ReadOnlyBinds []Bind
	// Network: "" or NetworkNone, NetworkLoopback, NetworkHost.
	Network NetworkMode
	// UserNS maps container root onto unprivileged host ids. nil means no
	// user namespace when the host runs as root (processes are then root
	// without capabilities); a non-root host always runs rootless, mapping
	// its own uid to container root.
	UserNS *IDMap
	// UID and GID the process runs as inside the container.
	UID, GID uint32
	// Capabilities kept (e.g. "CAP_NET_BIND_SERVICE"); all others are
	// dropped. Empty drops everything.
	Capabilities []string
	// MaskedPaths and ReadonlyPaths are added to the runc defaults.
	MaskedPaths   []string
	ReadonlyPaths []string
	// Env entries are set in every container; they win over the spec's.
	Env []string
	// Limits are ceilings: a spec (hence a manifest) may ask for less,
	// never more. MemoryBytes and Pids are required (> 0): a profile that
	// cannot bound memory and forks does not protect the host.
	Limits sandbox.Limits
	// CPUs is a CFS quota in cores (0.5 = half a core); 0 means none.
	CPUs float64
}

// DefaultWorkspaceDir is where the workspace appears inside a container.
const DefaultWorkspaceDir = "/workspace"

// RuntimeName is the profile's runtime, defaulted.
func (p Profile) RuntimeName() string {
	if p.Runtime == "" {
		return "runc"
	}
	return p.Runtime
}

func (p Profile) workspaceDir() string {
	if p.WorkspaceDir == "" {
		return DefaultWorkspaceDir
	}
	return p.WorkspaceDir
}

func (p Profile) network() NetworkMode {
	if p.Network == "" {
		return NetworkNone
	}
	return p.Network
}

// Validate checks the profile as written by the operator. Call it at
// config load; New calls it for every profile too.
func (p Profile) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadProfile, field, fmt.Sprintf(format, a...))
	}
	if err := checkPath(p.Rootfs); err != nil {
		return bad("rootfs", "%v", err)
	}
	if fi, err := os.Stat(p.Rootfs); err != nil || !fi.IsDir() {
		return bad("rootfs", "%q is not a directory", p.Rootfs)
	}
	if err := checkPath(p.workspaceDir()); err != nil || p.workspaceDir() == "/" {
		return bad("workspace_dir", "%q must be an absolute path below /", p.workspaceDir())
	}
	for i, b := range p.ReadOnlyBinds {
		if err := checkPath(b.Source); err != nil {
			return bad(fmt.Sprintf("binds[%d].source", i), "%v", err)
		}
		if err := checkPath(b.Destination); err != nil || b.Destination == "/" {
			return bad(fmt.Sprintf("binds[%d].destination", i), "%q must be an absolute path below /", b.Destination)
		}
		if _, err := os.Stat(b.Source); err != nil {
			return bad(fmt.Sprintf("binds[%d].source", i), "%v", err)
		}
		// The root is read-only, so the runtime cannot create a missing
		// mount point: refuse at load rather than at every start.
		if fi, err := os.Lstat(filepath.Join(p.Rootfs, b.Destination)); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return bad(fmt.Sprintf("binds[%d].destination", i), "%q must exist in the rootfs (and not be a symlink)", b.Destination)
		}
	}
	switch p.network() {
	case NetworkNone, NetworkLoopback, NetworkHost:
	default:
		return bad("network", "%q is not none, loopback or host", p.Network)
	}
	if p.UserNS != nil && p.UserNS.Size == 0 {
		return bad("userns.size", "must be >= 1")
	}
	for _, c := range p.Capabilities {
		if !slices.Contains(knownCaps, c) {
			return bad("capabilities", "unknown capability %q", c)
		}
	}
	for _, m := range append(slices.Clone(p.MaskedPaths), p.ReadonlyPaths...) {
		if err := checkPath(m); err != nil {
			return bad("masked/readonly paths", "%v", err)
		}
	}
	for _, e := range p.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsRune(e, 0) {
			return bad("env", "%q is not KEY=VALUE", e)
		}
	}
	if p.Limits.MemoryBytes <= 0 {
		return bad("limits.memory", "a profile needs a memory ceiling")
	}
	if p.Limits.Pids <= 0 {
		return bad("limits.pids", "a profile needs a pids ceiling")
	}
	if p.Limits.CPUTime < 0 || p.Limits.OpenFiles < 0 || p.CPUs < 0 {
		return bad("limits", "negative limit")
	}
	return nil
}

// Lookup returns the named profile or ErrUnknownProfile listing the
// declared ones.
func Lookup(profiles map[string]Profile, name string) (Profile, error) {
	if name == "" {
		return Profile{}, fmt.Errorf("%w: no profile named (the oci backend needs capabilities.profile)", ErrUnknownProfile)
	}
	return sandbox.LookupProfile(profiles, name)
}

// checkPath refuses what must never reach a mount table or a runtime's
// command line: relative or unclean paths, and quotes, backslashes,
// newlines or NUL.
func checkPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	if strings.ContainsAny(p, "\"'\\\x00\n\r") {
		return fmt.Errorf("path %q contains a quote, backslash, newline or NUL", p)
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("path %q is not absolute and clean", p)
	}
	return nil
}

var knownCaps = []string{
	"CAP_AUDIT_CONTROL", "CAP_AUDIT_READ", "CAP_AUDIT_WRITE", "CAP_BLOCK_SUSPEND",
	"CAP_BPF", "CAP_CHECKPOINT_RESTORE", "CAP_CHOWN", "CAP_DAC_OVERRIDE",
	"CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_KILL", "CAP_LEASE", "CAP_LINUX_IMMUTABLE",
	"CAP_MAC_ADMIN", "CAP_MAC_OVERRIDE", "CAP_MKNOD", "CAP_NET_ADMIN",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_RAW", "CAP_PERFMON",
	"CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_ADMIN",
	"CAP_SYS_BOOT", "CAP_SYS_CHROOT", "CAP_SYS_MODULE", "CAP_SYS_NICE",
	"CAP_SYS_PACCT", "CAP_SYS_PTRACE", "CAP_SYS_RAWIO", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_SYSLOG", "CAP_WAKE_ALARM",
}

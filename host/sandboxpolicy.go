package host

import (
	"os"
	"slices"
	"sort"

	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/oci"
)

// ociBackend is the registry's backend name for the OCI backend.
const ociBackend = "oci"

// profileNames lists every launch profile this host knows, sorted: the
// names configured and those of the full profiles.
func (h *Host) profileNames() []string {
	names := slices.Clone(h.cfg.Profiles)
	for n := range h.cfg.OCIProfiles {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// ociPolicy completes p for a capsule with backend = "oci", from its
// launch profile: the manifest's limits and network request are checked
// against the profile (oci.CheckManifest: an unknown profile or a widening
// is refused here, at load, naming the manifest line), the effective
// limits are the tighter of the profile's and the host's, exec entries are
// paths inside the profile's rootfs and must be executables there, and a
// user-namespaced profile gets its workspaces chowned to the mapped uid.
//
// With only profile names known (Config.Profiles, no OCIProfiles: a
// scratch host that validates a manifest and runs nothing) only the name
// is checked; the registry then refuses to spawn (no exec root).
func (h *Host) ociPolicy(m *manifest.Manifest, p *registry.CapsulePolicy) error {
	caps := m.Capabilities
	prof, ok := h.cfg.OCIProfiles[caps.Profile]
	if !ok {
		return nil
	}
	want := sandbox.Limits{
		MemoryBytes: m.Limits.MaxMemoryBytes,
		CPUTime:     m.Limits.MaxCPU,
		Pids:        m.Limits.MaxPids,
		OpenFiles:   m.Limits.MaxOpenFiles,
	}
	lim, err := oci.CheckManifest(h.cfg.OCIProfiles, caps.Profile, want, caps.Network)
	if err != nil {
		return widening(m, caps.Profile, prof, want, caps.Network, err)
	}
	// The profile's ceilings, then the host's: a capsule gets the
	// smaller of every bound that is set.
	hl := h.cfg.HostLimits
	p.Limits = sandbox.Limits{
		MemoryBytes: minSet(lim.MemoryBytes, hl.MemoryBytes),
		CPUTime:     minSet(lim.CPUTime, hl.CPUTime),
		Pids:        minSet(lim.Pids, hl.Pids),
		OpenFiles:   minSet(lim.OpenFiles, hl.OpenFiles),
	}
	p.ExecRoot = prof.Rootfs
	p.ExecHidden = hiddenPaths(prof)
	for _, e := range p.Exec {
		if _, err := registry.RootExecutable(p.ExecRoot, p.ExecHidden, e); err != nil {
			return m.Errorf("capabilities.exec", "%q is not an executable of launch profile %q's root filesystem %s: %v", e, caps.Profile, prof.Rootfs, err)
		}
	}
	p.WorkspaceOwner = workspaceOwner(prof)
	return nil
}

// widening turns an oci.CheckManifest refusal into a manifest error at the
// key it is about, keeping the oci error class (errors.Is ErrWidens).
func widening(m *manifest.Manifest, name string, prof oci.Profile, want sandbox.Limits, network bool, cause error) error {
	pl := prof.Limits
	var pos error
	switch {
	case network && prof.Network != oci.NetworkHost:
		mode := prof.Network
		if mode == "" {
			mode = oci.NetworkNone
		}
		pos = m.Errorf("capabilities.network", "launch profile %q has network %q; the network needs a profile with network = \"host\"", name, mode)
	case pl.MemoryBytes > 0 && want.MemoryBytes > pl.MemoryBytes:
		pos = m.Errorf("limits.max_memory_bytes", "%d exceeds launch profile %q's ceiling %d (a manifest can only lower limits)", want.MemoryBytes, name, pl.MemoryBytes)
	case pl.Pids > 0 && want.Pids > pl.Pids:
		pos = m.Errorf("limits.max_pids", "%d exceeds launch profile %q's ceiling %d (a manifest can only lower limits)", want.Pids, name, pl.Pids)
	case pl.OpenFiles > 0 && want.OpenFiles > pl.OpenFiles:
		pos = m.Errorf("limits.max_open_files", "%d exceeds launch profile %q's ceiling %d (a manifest can only lower limits)", want.OpenFiles, name, pl.OpenFiles)
	case pl.CPUTime > 0 && want.CPUTime > pl.CPUTime:
		pos = m.Errorf("limits.max_cpu_ms", "%d exceeds launch profile %q's ceiling %d (a manifest can only lower limits)", want.CPUTime.Milliseconds(), name, pl.CPUTime.Milliseconds())
	default:
		pos = m.Errorf("capabilities.profile", "launch profile %q: %v", name, cause)
	}
	return &causedError{pos: pos, cause: cause}
}

// causedError is a positioned manifest error that also carries the class
// of what caused it, so both errors.As(*manifest.Error) and errors.Is
// (oci.ErrWidens, oci.ErrUnknownProfile) hold. It reads as the position.
type causedError struct{ pos, cause error }

func (e *causedError) Error() string   { return e.pos.Error() }
func (e *causedError) Unwrap() []error { return []error{e.pos, e.cause} }

func minSet[T ~int | ~int64](a, b T) T {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// hiddenPaths are the in-container paths the OCI backend mounts over:
// the workspace, the fresh /tmp, /dev, /proc and /sys, the operator's
// binds and masks. An executable there in the rootfs is not what a
// process would run, so exec resolution refuses it.
func hiddenPaths(prof oci.Profile) []string {
	ws := prof.WorkspaceDir
	if ws == "" {
		ws = oci.DefaultWorkspaceDir
	}
	out := []string{ws, "/tmp", "/dev", "/proc", "/sys"}
	for _, b := range prof.ReadOnlyBinds {
		out = append(out, b.Destination)
	}
	return append(out, prof.MaskedPaths...)
}

// workspaceOwner is the host uid:gid a profile's processes run as, when
// that is not root: the workspace must be theirs to write. With a user
// namespace (runc) container ids are shifted by the mapping; runsc runs
// without one (gVisor is the boundary), so the ids are the profile's own.
// A non-root host runs rootless: its own uid is container root, and it
// already owns the workspace.
func workspaceOwner(prof oci.Profile) *registry.Owner {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid := int(prof.UID), int(prof.GID)
	if prof.UserNS != nil && prof.RuntimeName() != "runsc" {
		uid += int(prof.UserNS.HostUID)
		gid += int(prof.UserNS.HostGID)
	}
	if uid == 0 && gid == 0 {
		return nil
	}
	return &registry.Owner{UID: uid, GID: gid}
}

// checkProfileName refuses an oci capsule without a profile, and a
// profile the host does not declare.
func (h *Host) checkProfileName(m *manifest.Manifest) error {
	caps := m.Capabilities
	known := h.profileNames()
	switch {
	case caps.Backend == ociBackend && caps.Profile == "":
		return &causedError{
			pos:   m.Errorf("capabilities.profile", "missing: backend = \"oci\" needs a launch profile (declared by this host: %v)", known),
			cause: oci.ErrUnknownProfile,
		}
	case caps.Profile != "" && !slices.Contains(known, caps.Profile):
		return &causedError{
			pos:   m.Errorf("capabilities.profile", "launch profile %q is not declared by this host (declared: %v)", caps.Profile, known),
			cause: oci.ErrUnknownProfile,
		}
	}
	return nil
}

// ociProfilesOf returns the profiles of the registry's oci backend, when
// it is the in-tree one: the host checks manifests against exactly what
// the backend will enforce.
func ociProfilesOf(reg *registry.Registry) map[string]oci.Profile {
	if b, ok := reg.Backend(ociBackend).(*oci.Backend); ok && b != nil {
		return b.Profiles()
	}
	return nil
}

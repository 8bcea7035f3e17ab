package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
)

// policy derives the registry policy from the manifest, refusing what the
// host does not allow. A manifest can lower the host's limits, never raise
// them: raising is refused rather than clamped, so the operator learns the
// capsule expects more than it will get. What differs per backend comes
// from its policy data (Config.Policies), never from its name.
func (h *Host) policy(m *manifest.Manifest) (registry.CapsulePolicy, error) {
	fail := func(err error) (registry.CapsulePolicy, error) {
		return registry.CapsulePolicy{}, fmt.Errorf("%w: capsule %q: %w", ErrPolicy, m.Name, err)
	}
	if err := h.checkGrants(m); err != nil {
		return fail(err)
	}
	if err := h.checkCeilings(m); err != nil {
		return fail(err)
	}
	if err := h.checkPoolMemory(m); err != nil {
		return fail(err)
	}
	p := h.basePolicy(m)
	if err := h.execPolicy(m, &p); err != nil {
		return fail(err)
	}
	if err := h.profilePolicy(m, &p); err != nil {
		return fail(err)
	}
	return p, nil
}

// checkGrants refuses a backend, a launch profile or the network this
// host does not offer.
func (h *Host) checkGrants(m *manifest.Manifest) error {
	caps := m.Capabilities
	if !slices.Contains(h.cfg.Backends, caps.Backend) {
		return m.Errorf("capabilities.backend", "backend %q is not available on this host (available: %v)", caps.Backend, h.cfg.Backends)
	}
	if err := h.checkProfileName(m); err != nil {
		return err
	}
	if caps.Network && !h.cfg.AllowNetwork {
		return m.Errorf("capabilities.network", "network access is not allowed on this host")
	}
	return nil
}

// checkCeilings refuses a manifest limit above the host's.
func (h *Host) checkCeilings(m *manifest.Manifest) error {
	q, l := h.cfg.HostQuotas, h.cfg.HostLimits
	type ceil struct {
		key        string
		want, host int64
	}
	for _, c := range []ceil{
		{"limits.max_concurrent", int64(m.Limits.MaxConcurrent), int64(q.MaxConcurrent)},
		{"limits.max_retained", int64(m.Limits.MaxRetained), int64(q.MaxRetained)},
		{"limits.max_entries", int64(m.Limits.MaxEntries), int64(q.MaxEntries)},
		{"limits.max_memory_bytes", m.Limits.MaxMemoryBytes, l.MemoryBytes},
		{"limits.max_cpu_ms", m.Limits.MaxCPU.Milliseconds(), l.CPUTime.Milliseconds()},
		{"limits.max_pids", int64(m.Limits.MaxPids), int64(l.Pids)},
		{"limits.max_open_files", int64(m.Limits.MaxOpenFiles), int64(l.OpenFiles)},
		{"pool.memory_bytes", m.Pool.MemoryBytes, h.cfg.GuestMemoryBytes},
	} {
		if c.want > 0 && c.host > 0 && c.want > c.host {
			return m.Errorf(c.key, "%d exceeds the host's ceiling %d (a manifest can only lower limits)", c.want, c.host)
		}
	}
	return nil
}

// guestMemory is the linear memory limit of each of m's instances: the
// manifest's pool.memory_bytes (checked not to raise the host's), else
// the host's.
func (h *Host) guestMemory(m *manifest.Manifest) int64 {
	if m.Pool.MemoryBytes > 0 {
		return m.Pool.MemoryBytes
	}
	return h.cfg.GuestMemoryBytes
}

// checkPoolMemory refuses a pool that could hold more guest memory than
// the host grants one capsule: pool.max instances at the per-instance
// limit. Refused, not clamped, like a raised limit: silently shrinking
// pool.max would change the concurrency the capsule was written for, and
// the operator could not tell from the manifest what it gets.
func (h *Host) checkPoolMemory(m *manifest.Manifest) error {
	per, ceil := h.guestMemory(m), h.cfg.CapsuleGuestMemoryBytes
	if total := per * int64(m.Pool.Max); total > ceil {
		return m.Errorf("pool.max", "%d instances × %d bytes of guest memory each = %d bytes exceeds the host's per-capsule guest memory ceiling of %d bytes (lower pool.max to at most %d or set a smaller pool.memory_bytes)",
			m.Pool.Max, per, total, ceil, ceil/per)
	}
	return nil
}

// basePolicy is the policy the manifest asks for, within the host's
// ceilings (already checked): the manifest's limits where set, else the
// host's.
func (h *Host) basePolicy(m *manifest.Manifest) registry.CapsulePolicy {
	caps := m.Capabilities
	p := registry.CapsulePolicy{
		AllowPersistent: caps.AllowPersistent,
		Backend:         caps.Backend,
		Network:         caps.Network,
		Profile:         caps.Profile,
		Workspace:       filepath.Join(h.cfg.WorkspaceRoot, m.Name),
		Quotas: registry.Quotas{
			MaxConcurrent: m.Limits.MaxConcurrent,
			MaxRetained:   m.Limits.MaxRetained,
			MaxEntries:    m.Limits.MaxEntries,
		},
		Limits: h.cfg.HostLimits,
	}
	if m.Limits.MaxMemoryBytes > 0 {
		p.Limits.MemoryBytes = m.Limits.MaxMemoryBytes
	}
	if m.Limits.MaxCPU > 0 {
		p.Limits.CPUTime = m.Limits.MaxCPU
	}
	if m.Limits.MaxPids > 0 {
		p.Limits.Pids = m.Limits.MaxPids
	}
	if m.Limits.MaxOpenFiles > 0 {
		p.Limits.OpenFiles = m.Limits.MaxOpenFiles
	}
	p.OutputRate = m.Limits.MaxOutputRate
	return p
}

// execPolicy fills p.Exec: absolute entries as written (cleaned), bare
// names looked up on the host's PATH (the registry's HostPath, the one
// its exec check and the processes use, not the daemon's own), except on
// a backend whose commands run inside a root, where a host lookup means
// nothing.
func (h *Host) execPolicy(m *manifest.Manifest, p *registry.CapsulePolicy) error {
	caps := m.Capabilities
	inRoot := h.cfg.Policies[caps.Backend].ExecInRoot
	for _, e := range caps.Exec {
		if filepath.IsAbs(e) {
			p.Exec = append(p.Exec, filepath.Clean(e))
			continue
		}
		if inRoot {
			return m.Errorf("capabilities.exec", "%q: with backend %q executables are paths inside the image and must be absolute", e, caps.Backend)
		}
		abs, ok := lookPath(e, h.reg.HostPath())
		if !ok {
			return m.Errorf("capabilities.exec", "%q: not found in the host's PATH %s", e, h.reg.HostPath())
		}
		p.Exec = append(p.Exec, abs)
	}
	return nil
}

// lookPath finds name in the absolute directories of path: the first
// regular file with an execute bit, as the registry's exec check looks.
func lookPath(name, path string) (string, bool) {
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		c := filepath.Join(dir, name)
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return c, true
		}
	}
	return "", false
}

// profileNames lists every launch profile this host knows, sorted: the
// names configured and those of every backend's full profiles.
func (h *Host) profileNames() []string {
	names := slices.Clone(h.cfg.Profiles)
	for _, bp := range h.cfg.Policies {
		for n := range bp.Profiles {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}

// checkProfileName refuses a capsule without a profile on a backend whose
// commands run in a profile's root, and a profile the host does not
// declare.
func (h *Host) checkProfileName(m *manifest.Manifest) error {
	caps := m.Capabilities
	known := h.profileNames()
	switch {
	case h.cfg.Policies[caps.Backend].ExecInRoot && caps.Profile == "":
		return &causedError{
			pos:   m.Errorf("capabilities.profile", "missing: backend = %q needs a launch profile (declared by this host: %v)", caps.Backend, known),
			cause: sandbox.ErrUnknownProfile,
		}
	case caps.Profile != "" && !slices.Contains(known, caps.Profile):
		return &causedError{
			pos:   m.Errorf("capabilities.profile", "launch profile %q is not declared by this host (declared: %v)", caps.Profile, known),
			cause: sandbox.ErrUnknownProfile,
		}
	}
	return nil
}

// profilePolicy completes p from the capsule's launch profile, when its
// backend describes that profile in full: the manifest's limits and
// network request are checked against the profile (sandbox.CheckProfile:
// a widening is refused here, at load, naming the manifest line), the
// effective limits are the tighter of the profile's and the host's, exec
// entries are paths inside the profile's exec root and must be
// executables there, and the workspace goes to the profile's owner.
//
// With only the profile's name known (Config.Profiles: a scratch host
// that validates a manifest and runs nothing) only the name is checked;
// on a backend whose commands run in a root the registry then refuses to
// spawn (no exec root).
func (h *Host) profilePolicy(m *manifest.Manifest, p *registry.CapsulePolicy) error {
	caps := m.Capabilities
	profiles := h.cfg.Policies[caps.Backend].Profiles
	prof, ok := profiles[caps.Profile]
	if !ok {
		return nil
	}
	want := sandbox.Limits{
		MemoryBytes: m.Limits.MaxMemoryBytes,
		CPUTime:     m.Limits.MaxCPU,
		Pids:        m.Limits.MaxPids,
		OpenFiles:   m.Limits.MaxOpenFiles,
	}
	lim, err := sandbox.CheckProfile(profiles, caps.Profile, want, caps.Network)
	if err != nil {
		return widening(m, caps.Profile, prof, err)
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
	if prof.ExecRoot != "" {
		p.ExecRoot, p.ExecHidden = prof.ExecRoot, slices.Clone(prof.ExecHidden)
		for _, e := range p.Exec {
			if _, err := registry.RootExecutable(p.ExecRoot, p.ExecHidden, e); err != nil {
				return m.Errorf("capabilities.exec", "%q is not an executable of launch profile %q's root filesystem %s: %v", e, caps.Profile, prof.ExecRoot, err)
			}
		}
	}
	if o := prof.WorkspaceOwner; o != nil {
		p.WorkspaceOwner = &registry.Owner{UID: o.UID, GID: o.GID}
	}
	return nil
}

// limitKeys are the manifest keys of the limits a profile bounds.
var limitKeys = map[sandbox.LimitKind]string{
	sandbox.LimitMemory:    "limits.max_memory_bytes",
	sandbox.LimitPids:      "limits.max_pids",
	sandbox.LimitOpenFiles: "limits.max_open_files",
	sandbox.LimitCPU:       "limits.max_cpu_ms",
}

// widening turns a sandbox.CheckProfile refusal into a manifest error at
// the key it is about, keeping the seam's error class (errors.Is
// sandbox.ErrWidens).
func widening(m *manifest.Manifest, name string, prof sandbox.Profile, cause error) error {
	pos := m.Errorf("capabilities.profile", "launch profile %q: %v", name, cause)
	var we *sandbox.WidensError
	if errors.As(cause, &we) {
		switch key := limitKeys[we.Limit]; {
		case we.Network:
			mode := prof.NetworkMode
			if mode == "" {
				mode = "none"
			}
			pos = m.Errorf("capabilities.network", "launch profile %q has network %q; the network needs a profile with network = \"host\"", name, mode)
		case key != "" && we.Want > 0:
			want, ceiling := we.Want, we.Ceiling
			if we.Limit == sandbox.LimitCPU {
				want, ceiling = time.Duration(want).Milliseconds(), time.Duration(ceiling).Milliseconds()
			}
			pos = m.Errorf(key, "%d exceeds launch profile %q's ceiling %d (a manifest can only lower limits)", want, name, ceiling)
		}
	}
	return &causedError{pos: pos, cause: cause}
}

// causedError is a positioned manifest error that also carries the class
// of what caused it, so both errors.As(*manifest.Error) and errors.Is
// (sandbox.ErrWidens, sandbox.ErrUnknownProfile) hold. It reads as the
// position.
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

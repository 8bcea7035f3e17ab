package sandbox

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Backend policy: what the layers above the seam (host, registry) need to
// know about a backend to derive and enforce a capsule's policy, as data.
// Whoever constructs a backend (the daemon) describes it here, so nothing
// above the seam decides by a backend's name or its concrete type.

// Launch-profile error classes. Both wrap ErrInvalidSpec, so a caller that
// only knows the seam classifies them as a bad request.
var (
	// ErrUnknownProfile: a manifest or spec names a launch profile the
	// host does not declare (or names none where one is needed).
	ErrUnknownProfile = fmt.Errorf("%w: unknown launch profile", ErrInvalidSpec)
	// ErrWidens: a request asks for more than its launch profile allows
	// (a higher limit, the network on a profile without it). The error is
	// a *WidensError naming the limit.
	ErrWidens = fmt.Errorf("%w: request widens its launch profile", ErrInvalidSpec)
)

// BackendPolicy describes one backend.
type BackendPolicy struct {
	// ExecInRoot: processes run a launch profile's root filesystem, never
	// the host's, so a host lookup would check a file that never runs. A
	// capsule on such a backend must name a profile, its exec entries are
	// absolute paths inside the profile's ExecRoot, and with no ExecRoot
	// known (a profile known by name only) nothing is spawned.
	ExecInRoot bool
	// Profiles are the backend's launch profiles by name.
	Profiles map[string]Profile
}

// Profile is a launch profile described by what it allows, not by how the
// backend enforces it.
type Profile struct {
	// Limits are ceilings: a request may ask for less, never more. A zero
	// field is no ceiling.
	Limits Limits
	// Network: a process may be granted the network under this profile.
	Network bool
	// NetworkMode is the profile's network setting as the operator wrote
	// it ("none", "loopback", "host"), for messages.
	NetworkMode string
	// ExecRoot is the host directory the processes see as "/" (the
	// rootfs); "" when commands resolve on the host.
	ExecRoot string
	// ExecHidden are in-root paths the backend mounts over (workspace,
	// /tmp, /dev, ...): the root's content there is not what a process
	// would run.
	ExecHidden []string
	// WorkspaceOwner is the host uid:gid the processes run as, when the
	// workspace must be given to them to be writable; nil: the host's
	// own ids already own it.
	WorkspaceOwner *Owner
}

// Owner is a numeric host uid and gid.
type Owner struct{ UID, GID int }

// WidensError is a request that asks for more than its profile allows.
// errors.Is(err, ErrWidens) holds.
type WidensError struct {
	Profile string
	// Network: the request asks for the network, which the profile does
	// not grant (Limit is then LimitNone).
	Network bool
	// Limit is the limit asked beyond its ceiling.
	Limit LimitKind
	// Want and Ceiling are in the Limits field's unit (bytes, a count,
	// nanoseconds for LimitCPU). A negative Want is refused under any
	// ceiling.
	Want, Ceiling int64
}

func (e *WidensError) Error() string {
	switch {
	case e.Network:
		return fmt.Sprintf("%v: profile %q does not grant the network", ErrWidens, e.Profile)
	case e.Want < 0:
		return fmt.Sprintf("%v: profile %q: %s %d is negative", ErrWidens, e.Profile, e.Limit, e.Want)
	}
	return fmt.Sprintf("%v: profile %q: %s %d exceeds the profile's %d", ErrWidens, e.Profile, e.Limit, e.Want, e.Ceiling)
}

func (e *WidensError) Unwrap() error { return ErrWidens }

// LookupProfile returns the named profile, or an error wrapping
// ErrUnknownProfile that lists the declared ones.
// It is generic so that a backend's own profile type (oci.Profile) is
// looked up the same way.
func LookupProfile[P any](profiles map[string]P, name string) (P, error) {
	var zero P
	if name == "" {
		return zero, fmt.Errorf("%w: no profile named", ErrUnknownProfile)
	}
	p, ok := profiles[name]
	if !ok {
		names := make([]string, 0, len(profiles))
		for n := range profiles {
			names = append(names, n)
		}
		slices.Sort(names)
		return zero, fmt.Errorf("%w %q (declared: %s)", ErrUnknownProfile, name, strings.Join(names, ", "))
	}
	return p, nil
}

// CheckProfile is the check "does this request fit this profile": the
// named profile must exist, the network may be asked for only where the
// profile grants it, and every limit must be at most the profile's
// ceiling. It returns the effective limits: a zero request field takes the
// ceiling. Refusals wrap ErrUnknownProfile or are a *WidensError.
func CheckProfile(profiles map[string]Profile, name string, want Limits, network bool) (Limits, error) {
	p, err := LookupProfile(profiles, name)
	if err != nil {
		return Limits{}, err
	}
	if network && !p.Network {
		return Limits{}, &WidensError{Profile: name, Network: true}
	}
	return p.fit(name, want)
}

// fit tightens want under the profile's ceilings, in a fixed order
// (memory, pids, open files, cpu time) so the first widening is reported.
func (p Profile) fit(name string, want Limits) (Limits, error) {
	out := want
	for _, l := range []struct {
		limit         LimitKind
		want, ceiling int64
		set           func(int64)
	}{
		{LimitMemory, want.MemoryBytes, p.Limits.MemoryBytes, func(v int64) { out.MemoryBytes = v }},
		{LimitPids, int64(want.Pids), int64(p.Limits.Pids), func(v int64) { out.Pids = int(v) }},
		{LimitOpenFiles, int64(want.OpenFiles), int64(p.Limits.OpenFiles), func(v int64) { out.OpenFiles = int(v) }},
		{LimitCPU, int64(want.CPUTime), int64(p.Limits.CPUTime), func(v int64) { out.CPUTime = time.Duration(v) }},
	} {
		switch {
		case l.want < 0, l.ceiling > 0 && l.want > l.ceiling:
			return Limits{}, &WidensError{Profile: name, Limit: l.limit, Want: l.want, Ceiling: l.ceiling}
		case l.want == 0:
			l.set(l.ceiling)
		}
	}
	return out, nil
}

package oci

import (
	"os"

	"github.com/capsule-host/capsule-host/sandbox"
)

// PolicyOf describes launch profiles as the seam's policy data, which the
// host checks manifests against and the registry resolves commands by:
// commands run inside the profile's rootfs, never on the host. This is the
// one place that knows how this backend lays a container out (what it
// mounts over, whose ids its processes get). nil profiles: the policy of
// a host that knows profiles by name only.
func PolicyOf(profiles map[string]Profile) sandbox.BackendPolicy {
	out := sandbox.BackendPolicy{ExecInRoot: true}
	if profiles != nil {
		out.Profiles = make(map[string]sandbox.Profile, len(profiles))
	}
	for n, p := range profiles {
		out.Profiles[n] = sandbox.Profile{
			Limits:         p.Limits,
			Network:        p.network() == NetworkHost,
			NetworkMode:    string(p.network()),
			ExecRoot:       p.Rootfs,
			ExecHidden:     hiddenPaths(p),
			WorkspaceOwner: workspaceOwner(p),
		}
	}
	return out
}

// Policy is PolicyOf the backend's validated profiles: exactly what Start
// will enforce.
func (b *Backend) Policy() sandbox.BackendPolicy { return b.policy }

// hiddenPaths are the in-container paths this backend mounts over: the
// workspace, the fresh /tmp, /dev, /proc and /sys, the operator's binds
// and masks. An executable there in the rootfs is not what a process
// would run, so exec resolution refuses it.
func hiddenPaths(p Profile) []string {
	out := []string{p.workspaceDir(), "/tmp", "/dev", "/proc", "/sys"}
	for _, b := range p.ReadOnlyBinds {
		out = append(out, b.Destination)
	}
	return append(out, p.MaskedPaths...)
}

// workspaceOwner is the host uid:gid a profile's processes run as, when
// that is not root: the workspace must be theirs to write. With a user
// namespace (runc) container ids are shifted by the mapping; runsc runs
// without one (gVisor is the boundary), so the ids are the profile's own.
// A non-root host runs rootless: its own uid is container root, and it
// already owns the workspace.
func workspaceOwner(p Profile) *sandbox.Owner {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid := int(p.UID), int(p.GID)
	if p.UserNS != nil && p.RuntimeName() != "runsc" {
		uid += int(p.UserNS.HostUID)
		gid += int(p.UserNS.HostGID)
	}
	if uid == 0 && gid == 0 {
		return nil
	}
	return &sandbox.Owner{UID: uid, GID: gid}
}

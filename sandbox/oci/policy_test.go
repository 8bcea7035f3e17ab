package oci

import (
	"os"
	"slices"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
)

// PolicyOf describes profiles as the seam's data: commands run in the
// rootfs, the network only with NetworkHost, the hidden paths are what
// the container mounts over, and the workspace owner is the container
// uid shifted by the user namespace (runc) or not (runsc).
func TestPolicyOf(t *testing.T) {
	if p := PolicyOf(nil); !p.ExecInRoot || p.Profiles != nil {
		t.Errorf("names-only policy %+v", p)
	}
	lim := sandbox.Limits{MemoryBytes: 1 << 20, Pids: 8}
	userns := &IDMap{HostUID: 100000, HostGID: 200000, Size: 65536}
	pol := PolicyOf(map[string]Profile{
		"runc": {Rootfs: "/img", Limits: lim, UserNS: userns, UID: 1000, GID: 1000,
			WorkspaceDir: "/work", ReadOnlyBinds: []Bind{{Source: "/etc/ssl", Destination: "/etc/ssl"}}, MaskedPaths: []string{"/secret"}},
		"runsc": {Rootfs: "/img", Runtime: "runsc", UserNS: userns, UID: 1000, GID: 1000, Network: NetworkHost},
		"root":  {Rootfs: "/img", Network: NetworkLoopback},
	})
	r := pol.Profiles["runc"]
	if r.ExecRoot != "/img" || r.Limits != lim || r.Network || r.NetworkMode != "none" {
		t.Errorf("runc profile %+v", r)
	}
	if want := []string{"/work", "/tmp", "/dev", "/proc", "/sys", "/etc/ssl", "/secret"}; !slices.Equal(r.ExecHidden, want) {
		t.Errorf("hidden %q; want %q", r.ExecHidden, want)
	}
	if s := pol.Profiles["runsc"]; !s.Network || s.NetworkMode != "host" {
		t.Errorf("runsc network %+v", s)
	}
	if l := pol.Profiles["root"]; l.Network || l.NetworkMode != "loopback" || l.WorkspaceOwner != nil {
		t.Errorf("root profile %+v", l)
	}
	if os.Geteuid() != 0 {
		if r.WorkspaceOwner != nil {
			t.Errorf("rootless host: workspace owner %+v, want none", r.WorkspaceOwner)
		}
		return
	}
	if o := r.WorkspaceOwner; o == nil || *o != (sandbox.Owner{UID: 101000, GID: 201000}) {
		t.Errorf("runc owner %+v; want 101000:201000", o)
	}
	if o := pol.Profiles["runsc"].WorkspaceOwner; o == nil || *o != (sandbox.Owner{UID: 1000, GID: 1000}) {
		t.Errorf("runsc owner %+v; want 1000:1000 (no user namespace)", o)
	}
}

package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/oci"
)

// fakeImage is a root filesystem with a multi-call binary behind /bin/sh:
// enough for policy derivation, which only resolves paths in it.
func fakeImage(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(root, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	return root
}

// A manifest selecting oci is checked against its launch profile at load:
// unknown and widened profiles, and exec entries the image lacks, are
// refused with the manifest line; an accepted one carries the profile's
// rootfs as exec root and the tighter of the limits.
func TestOCIPolicy(t *testing.T) {
	img := fakeImage(t)
	profiles := map[string]oci.Profile{
		"test": {Rootfs: img, Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 64, OpenFiles: 256}, Network: oci.NetworkNone,
			UserNS: &oci.IDMap{HostUID: 100000, HostGID: 100000, Size: 65536}, UID: 1000, GID: 1000},
		"net": {Rootfs: img, Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 64}, Network: oci.NetworkHost},
	}
	e := newHost(t, func(c *host.Config) {
		c.Backends = []string{"local", "oci"}
		c.Policies = map[string]sandbox.BackendPolicy{"oci": oci.PolicyOf(profiles)}
		c.AllowNetwork = true
		c.HostLimits = sandbox.Limits{MemoryBytes: 32 << 20}
	})
	const oci1 = "[capabilities]\nbackend = \"oci\"\nprofile = \"test\"\n"
	tests := []struct {
		name, extra string
		want        error
		msg         string
	}{
		{"unknown profile", "[capabilities]\nbackend = \"oci\"\nprofile = \"nope\"\n", sandbox.ErrUnknownProfile,
			`Capsule.toml:8: capabilities.profile: launch profile "nope" is not declared by this host (declared: [net test])`},
		{"no profile", "[capabilities]\nbackend = \"oci\"\n", sandbox.ErrUnknownProfile,
			`Capsule.toml:6: capabilities.profile: missing: backend = "oci" needs a launch profile (declared by this host: [net test])`},
		{"widen pids", "[limits]\nmax_pids = 65\n" + oci1, sandbox.ErrWidens,
			`Capsule.toml:7: limits.max_pids: 65 exceeds launch profile "test"'s ceiling 64 (a manifest can only lower limits)`},
		{"widen open files", "[limits]\nmax_open_files = 1000\n" + oci1, sandbox.ErrWidens,
			`Capsule.toml:7: limits.max_open_files: 1000 exceeds launch profile "test"'s ceiling 256`},
		{"widen network", oci1 + "network = true\n", sandbox.ErrWidens,
			`Capsule.toml:9: capabilities.network: launch profile "test" has network "none"; the network needs a profile with network = "host"`},
		{"exec not in image", oci1 + "exec = [\"/bin/bash\"]\n", host.ErrPolicy,
			`Capsule.toml:9: capabilities.exec: "/bin/bash" is not an executable of launch profile "test"'s root filesystem`},
		{"exec relative", oci1 + "exec = [\"sh\"]\n", host.ErrPolicy,
			`capabilities.exec: "sh": with backend "oci" executables are paths inside the image and must be absolute`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.h.Load(context.Background(), capsuleDir(t, "x", toolsWasm, tc.extra))
			if !errors.Is(err, host.ErrPolicy) || !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.msg) {
				t.Fatalf("err =\n  %v\nwant %v containing\n  %s", err, tc.want, tc.msg)
			}
		})
	}

	c := load(t, e, "ok", "[limits]\nmax_pids = 10\n"+oci1+"exec = [\"/bin/sh\"]\nallow_persistent = true\n")
	p := c.Policy()
	want := sandbox.Limits{MemoryBytes: 32 << 20, Pids: 10, OpenFiles: 256} // host memory < profile's; manifest pids; profile files
	if p.ExecRoot != img || p.Limits != want || !slices.Equal(p.Exec, []string{"/bin/sh"}) || p.Profile != "test" || p.Network {
		t.Errorf("policy %+v; want exec root %s, limits %+v", p, img, want)
	}
	if !slices.Contains(p.ExecHidden, "/workspace") || !slices.Contains(p.ExecHidden, "/tmp") {
		t.Errorf("hidden %v", p.ExecHidden)
	}
	if os.Geteuid() == 0 {
		if o := p.WorkspaceOwner; o == nil || *o != (registry.Owner{UID: 101000, GID: 101000}) {
			t.Errorf("workspace owner %+v; want 101000:101000 (host 100000 + container 1000)", o)
		}
	}
	// Network granted by manifest, host and profile.
	c = load(t, e, "net", "[capabilities]\nbackend = \"oci\"\nprofile = \"net\"\nnetwork = true\nexec = [\"/bin/sh\"]\n")
	if p := c.Policy(); !p.Network || p.WorkspaceOwner != nil {
		t.Errorf("net policy %+v", p)
	}
}

// network = true is refused when the host does not allow it, whatever the
// profile, and only names (no full profiles) still checks the name.
func TestOCIPolicyHostRefusals(t *testing.T) {
	img := fakeImage(t)
	e := newHost(t, func(c *host.Config) {
		c.Backends = []string{"local", "oci", "bwrap"}
		c.Policies = map[string]sandbox.BackendPolicy{"oci": oci.PolicyOf(map[string]oci.Profile{"net": {Rootfs: img, Limits: sandbox.Limits{MemoryBytes: 1 << 20, Pids: 8}, Network: oci.NetworkHost}})}
	})
	for _, extra := range []string{
		"[capabilities]\nbackend = \"oci\"\nprofile = \"net\"\nnetwork = true\n",
		"[capabilities]\nbackend = \"bwrap\"\nnetwork = true\n",
	} {
		_, err := e.h.Load(context.Background(), capsuleDir(t, "x", toolsWasm, extra))
		if !errors.Is(err, host.ErrPolicy) || !strings.Contains(fmt.Sprint(err), "capabilities.network: network access is not allowed on this host") {
			t.Errorf("%q: %v", extra, err)
		}
	}
	names := newHost(t, func(c *host.Config) {
		c.Backends = []string{"local", "oci"}
		c.Policies = map[string]sandbox.BackendPolicy{"oci": oci.PolicyOf(nil)}
		c.Profiles = []string{"only-name"}
	})
	c := load(t, names, "x", "[capabilities]\nbackend = \"oci\"\nprofile = \"only-name\"\nexec = [\"/bin/sh\"]\n")
	if p := c.Policy(); p.ExecRoot != "" {
		t.Errorf("names-only policy has exec root %q", p.ExecRoot)
	}
	if _, err := names.h.Load(context.Background(), capsuleDir(t, "y", toolsWasm, "[capabilities]\nbackend = \"oci\"\nprofile = \"other\"\n")); !errors.Is(err, sandbox.ErrUnknownProfile) {
		t.Errorf("names-only unknown profile: %v", err)
	}
}

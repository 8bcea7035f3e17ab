package oci

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The oci profiles, described as seam policy (PolicyOf), are checked by
// the one limit check, sandbox.CheckProfile: the host's at load, Start's
// at spawn.
func TestCheckManifest(t *testing.T) {
	rfs := t.TempDir()
	profiles := map[string]Profile{
		"small": {Rootfs: rfs, Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 32, CPUTime: time.Minute}},
		"net":   {Rootfs: rfs, Network: NetworkHost, Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 32}},
	}
	tests := []struct {
		name    string
		profile string
		want    sandbox.Limits
		network bool
		err     error
		got     sandbox.Limits
	}{
		{"defaults to ceilings", "small", sandbox.Limits{}, false, nil, sandbox.Limits{MemoryBytes: 64 << 20, Pids: 32, CPUTime: time.Minute}},
		{"tightens", "small", sandbox.Limits{MemoryBytes: 16 << 20, Pids: 8, CPUTime: time.Second, OpenFiles: 64}, false, nil, sandbox.Limits{MemoryBytes: 16 << 20, Pids: 8, CPUTime: time.Second, OpenFiles: 64}},
		{"unknown profile", "big", sandbox.Limits{}, false, ErrUnknownProfile, sandbox.Limits{}},
		{"no profile", "", sandbox.Limits{}, false, ErrUnknownProfile, sandbox.Limits{}},
		{"widens memory", "small", sandbox.Limits{MemoryBytes: 65 << 20}, false, ErrWidens, sandbox.Limits{}},
		{"widens pids", "small", sandbox.Limits{Pids: 33}, false, ErrWidens, sandbox.Limits{}},
		{"widens cpu", "small", sandbox.Limits{CPUTime: time.Hour}, false, ErrWidens, sandbox.Limits{}},
		{"asks network of a private profile", "small", sandbox.Limits{}, true, ErrWidens, sandbox.Limits{}},
		{"network where granted", "net", sandbox.Limits{Pids: 4}, true, nil, sandbox.Limits{MemoryBytes: 64 << 20, Pids: 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sandbox.CheckProfile(PolicyOf(profiles).Profiles, tc.profile, tc.want, tc.network)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err != nil && !errors.Is(err, sandbox.ErrInvalidSpec) {
				t.Fatalf("%v is not ErrInvalidSpec", err)
			}
			if got != tc.got {
				t.Fatalf("limits %+v, want %+v", got, tc.got)
			}
		})
	}
}

func TestProfileValidate(t *testing.T) {
	rfs := t.TempDir()
	os.Mkdir(filepath.Join(rfs, "mnt"), 0o755)
	os.Symlink("/etc", filepath.Join(rfs, "link"))
	ok := Profile{Rootfs: rfs, Limits: sandbox.Limits{MemoryBytes: 1 << 20, Pids: 1}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	mut := func(f func(*Profile)) Profile { p := ok; f(&p); return p }
	bad := map[string]Profile{
		"relative rootfs":    mut(func(p *Profile) { p.Rootfs = "rootfs" }),
		"quote in rootfs":    mut(func(p *Profile) { p.Rootfs = rfs + `"x` }),
		"missing rootfs":     mut(func(p *Profile) { p.Rootfs = rfs + "/nope" }),
		"backslash bind":     mut(func(p *Profile) { p.ReadOnlyBinds = []Bind{{Source: `/etc\x`, Destination: "/mnt"}} }),
		"unclean bind":       mut(func(p *Profile) { p.ReadOnlyBinds = []Bind{{Source: "/etc/../root", Destination: "/mnt"}} }),
		"missing mountpoint": mut(func(p *Profile) { p.ReadOnlyBinds = []Bind{{Source: "/etc", Destination: "/nope"}} }),
		"symlink mountpoint": mut(func(p *Profile) { p.ReadOnlyBinds = []Bind{{Source: "/etc", Destination: "/link"}} }),
		"bind over root":     mut(func(p *Profile) { p.ReadOnlyBinds = []Bind{{Source: "/etc", Destination: "/"}} }),
		"no memory ceiling":  mut(func(p *Profile) { p.Limits.MemoryBytes = 0 }),
		"no pids ceiling":    mut(func(p *Profile) { p.Limits.Pids = 0 }),
		"unknown cap":        mut(func(p *Profile) { p.Capabilities = []string{"CAP_EVERYTHING"} }),
		"bad network":        mut(func(p *Profile) { p.Network = "bridge" }),
		"workspace at root":  mut(func(p *Profile) { p.WorkspaceDir = "/" }),
		"nul in mask":        mut(func(p *Profile) { p.MaskedPaths = []string{"/a\x00b"} }),
		"empty userns":       mut(func(p *Profile) { p.UserNS = &IDMap{HostUID: 1} }),
	}
	for name, p := range bad {
		t.Run(name, func(t *testing.T) {
			if err := p.Validate(); !errors.Is(err, ErrBadProfile) {
				t.Fatalf("want ErrBadProfile, got %v", err)
			}
		})
	}
	if _, err := New(Options{Root: t.TempDir(), Profiles: map[string]Profile{"x": bad["no pids ceiling"]}}); !errors.Is(err, ErrBadProfile) {
		t.Fatalf("New accepted a bad profile: %v", err)
	}
}

func TestStartRefusesWidening(t *testing.T) {
	e := newEnv(t, nil)
	spec := e.spec("/bin/true")
	spec.Limits.MemoryBytes = 1 << 40
	if _, err := e.b.Start(t.Context(), spec); !errors.Is(err, ErrWidens) {
		t.Fatalf("want ErrWidens, got %v", err)
	}
	spec = e.spec("/bin/true")
	spec.Isolation.Profile = "nope"
	if _, err := e.b.Start(t.Context(), spec); !errors.Is(err, ErrUnknownProfile) {
		t.Fatalf("want ErrUnknownProfile, got %v", err)
	}
	spec = e.spec("/bin/true")
	spec.Cwd = "/etc"
	if _, err := e.b.Start(t.Context(), spec); !errors.Is(err, sandbox.ErrBoundaryEscape) {
		t.Fatalf("want ErrBoundaryEscape, got %v", err)
	}
}

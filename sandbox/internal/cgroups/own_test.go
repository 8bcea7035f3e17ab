package cgroups

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

// OwnGroups puts a keeper beside its starter's cgroup, in the tracking
// hierarchies only: under systemd that is outside the unit and inside its
// slice; the v1 controller hierarchies are left where they are.
func TestOwnGroups(t *testing.T) {
	hybrid := ParseMounts([]byte(hybridMountinfo))
	v2 := ParseMounts([]byte("29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"))
	legacy := ParseMounts([]byte("39 30 0:36 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"))
	for _, tc := range []struct {
		name   string
		mounts []Mount
		cgroup string
		want   []Placement
	}{
		{"hybrid, at the roots (this machine)", hybrid, hybridCgroup, []Placement{
			{From: "/sys/fs/cgroup/systemd", Dir: "/sys/fs/cgroup/systemd/capsule-host-keepers/k"},
			{From: "/sys/fs/cgroup/unified", Dir: "/sys/fs/cgroup/unified/capsule-host-keepers/k"},
		}},
		{"hybrid, a systemd service", hybrid,
			"9:name=systemd:/system.slice/capsule-host.service\n4:memory:/system.slice/capsule-host.service\n0::/system.slice/capsule-host.service\n", []Placement{
				{From: "/sys/fs/cgroup/systemd/system.slice/capsule-host.service", Dir: "/sys/fs/cgroup/systemd/system.slice/capsule-host-keepers/k"},
				{From: "/sys/fs/cgroup/unified/system.slice/capsule-host.service", Dir: "/sys/fs/cgroup/unified/system.slice/capsule-host-keepers/k"},
			}},
		{"unified, a systemd service", v2, "0::/system.slice/capsule-host.service\n", []Placement{
			{From: "/sys/fs/cgroup/system.slice/capsule-host.service", Dir: "/sys/fs/cgroup/system.slice/capsule-host-keepers/k"},
		}},
		{"legacy: the named hierarchy only", legacy, "9:name=systemd:/user.slice/a.scope\n4:memory:/user.slice/a.scope\n", []Placement{
			{From: "/sys/fs/cgroup/systemd/user.slice/a.scope", Dir: "/sys/fs/cgroup/systemd/user.slice/capsule-host-keepers/k"},
		}},
		{"a namespace's root: below it", []Mount{{Dir: "/sys/fs/cgroup", Root: "/kubepods/pod1", V2: true}}, "0::/kubepods/pod1\n", []Placement{
			{From: "/sys/fs/cgroup", Dir: "/sys/fs/cgroup/capsule-host-keepers/k"},
		}},
		{"membership outside the mount", []Mount{{Dir: "/m", Root: "/pod", V2: true}}, "0::/other\n", nil},
		{"no tracking hierarchy", ParseMounts([]byte("34 30 0:31 / /cg/memory rw - cgroup cgroup rw,memory\n")), "4:memory:/a\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OwnGroups(tc.mounts, ParseProcCgroup([]byte(tc.cgroup)), "k"); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("OwnGroups =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// A name that is not one path element could climb out of the keepers'
// group: refused before anything is touched.
func TestMoveOutRefusesPaths(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "../x"} {
		if moved, err := MoveOut(name); err == nil || moved != nil {
			t.Errorf("MoveOut(%q) = %v, %v; want a refusal", name, moved, err)
		}
	}
}

// removeTreeOf removes a dead host's leaves and empty groups, never a
// live host's leaf (a pooled group between two uses is empty too), and
// never a populated group (plain directories stand in for cgroups: rmdir
// has the same rule there).
func TestRemoveTreeOfSparesLiveHosts(t *testing.T) {
	self := os.Getpid()
	live := fmt.Sprintf("h%d-%d-pool1", self, procfs.StartTime(self))
	dead := fmt.Sprintf("h1-%d-pool1", procfs.StartTime(1)+7) // PID 1 with another start time: gone
	root := writeFiles(t, map[string]string{"busy/capsule-host/other/file": "x"})
	for _, d := range []string{"k/capsule-host/" + live, "k/capsule-host/" + dead, "k/capsule-host/x", "gone/capsule-host/" + dead} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"k", "gone", "busy"} {
		removeTreeOf(filepath.Join(root, d), HostGone)
	}
	for d, want := range map[string]bool{
		"k/capsule-host/" + live: true, "k/capsule-host/" + dead: false, "k/capsule-host/x": false,
		"gone": false, "busy/capsule-host/other/file": true,
	} {
		_, err := os.Stat(filepath.Join(root, d))
		if (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", d, err == nil, want)
		}
	}
}

func TestHostGone(t *testing.T) {
	self := os.Getpid()
	start := procfs.StartTime(self)
	for name, want := range map[string]bool{
		fmt.Sprintf("h%d-%d-pool1", self, start):      false, // this process
		fmt.Sprintf("h1-%d-x", procfs.StartTime(1)):   false, // init, alive
		fmt.Sprintf("h1-%d-x", procfs.StartTime(1)+7): true,  // PID 1 with another start: that host is gone
		"h4194305-1-x": true, // above pid_max
		"capsule-host": false, "h1-x-y": false, "h-1-2-x": false, "h12-3": false,
	} {
		if got := HostGone(name); got != want {
			t.Errorf("HostGone(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestKeeperGroupShape(t *testing.T) {
	g := KeeperGroup("bwrap", "/var/lib/capsule-host/keeper/bwrap")
	if g != KeeperGroup("bwrap", "/var/lib/capsule-host/keeper/bwrap") || g == KeeperGroup("bwrap", "/other") || !isKeeperGroup(g) {
		t.Fatalf("KeeperGroup = %q: not stable per directory, not distinct, or not recognised", g)
	}
	for name, want := range map[string]bool{
		"local-0123456789ab": true, "a-b-0123456789ab": true,
		"capsule-oci": false, "capsule-0e926b0f2567218707ff2c2a750dad4e": false, "local-0123456789AB": false,
		"local-0123456789a": false, "-0123456789ab": false, "local-0123456789ag": false,
	} {
		if got := isKeeperGroup(name); got != want {
			t.Errorf("isKeeperGroup(%q) = %v, want %v", name, got, want)
		}
	}
}

// removeIdle on real cgroups (v2, as root): a dead keeper's empty group
// goes with its dead host's leaf; a group a process sits in stays, and
// so does an empty group that is not a keeper's (an OCI runtime's
// container group between its creation and its init joining it).
func TestRemoveIdleOnCgroups(t *testing.T) {
	s, err := Detect()
	if err != nil || s.V2 == "" || os.Geteuid() != 0 {
		t.Skip("SKIP LOUDLY: needs root and a v2 hierarchy")
	}
	parent := filepath.Join(s.V2, fmt.Sprintf("capsule-test-idle-%d", os.Getpid()))
	dead := fmt.Sprintf("h1-%d-pool1", procfs.StartTime(1)+7)
	for _, d := range []string{"local-0123456789ab/capsule-host/" + dead, "bwrap-0123456789ab", "capsule-oci/capsule-1"} {
		if err := os.MkdirAll(filepath.Join(parent, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sleeper.Process.Kill()
		sleeper.Wait()
		removeTreeOf(parent, func(string) bool { return true })
	})
	if err := writeFile(filepath.Join(parent, "bwrap-0123456789ab", "cgroup.procs"), fmt.Sprint(sleeper.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	removeIdle(parent, "mine-0123456789ab")
	for d, want := range map[string]bool{"local-0123456789ab": false, "bwrap-0123456789ab": true, "capsule-oci/capsule-1": true} {
		if _, err := os.Stat(filepath.Join(parent, d)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", d, err == nil, want)
		}
	}
}

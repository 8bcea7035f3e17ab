package cgroups

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// hybridMountinfo is this kind of machine's table: v1 controllers, a named
// systemd hierarchy and the v2 tree at .../unified, among other mounts.
const hybridMountinfo = `22 1 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridCgroup = `9:name=systemd:/
8:pids:/
4:memory:/process_api/x
2:cpuacct:/
1:cpu:/
0::/
`

func TestParseMounts(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Mount
	}{
		{"hybrid", hybridMountinfo, []Mount{
			{Dir: "/sys/fs/cgroup/cpu", Root: "/", Controllers: []string{"cpu"}},
			{Dir: "/sys/fs/cgroup/cpuacct", Root: "/", Controllers: []string{"cpuacct"}},
			{Dir: "/sys/fs/cgroup/memory", Root: "/", Controllers: []string{"memory"}},
			{Dir: "/sys/fs/cgroup/pids", Root: "/", Controllers: []string{"pids"}},
			{Dir: "/sys/fs/cgroup/systemd", Root: "/", Controllers: []string{"name=systemd"}},
			{Dir: "/sys/fs/cgroup/unified", Root: "/", V2: true},
		}},
		{"v2 only, optional fields", "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 master:1 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			[]Mount{{Dir: "/sys/fs/cgroup", Root: "/", V2: true}}},
		{"comounted v1", "33 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
			[]Mount{{Dir: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Controllers: []string{"cpu", "cpuacct"}}}},
		{"namespaced root, escaped dir", `50 40 0:37 /kubepods/pod1 /mnt/cg\040x rw - cgroup2 cgroup2 rw` + "\n",
			[]Mount{{Dir: "/mnt/cg x", Root: "/kubepods/pod1", V2: true}}},
		{"no controllers left", "60 30 0:40 / /x rw - cgroup cgroup rw,xattr\n", nil},
		{"not cgroups, no separator, short", "1 2 3\n70 1 0:1 / / rw - ext4 /dev/sda1 rw\n71 1 0:2 / /y rw -\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseMounts([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseMounts =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestDirs(t *testing.T) {
	hybrid := ParseMounts([]byte(hybridMountinfo))
	for _, tc := range []struct {
		name   string
		mounts []Mount
		cgroup string
		rel    string
		want   []string
	}{
		{"hybrid self, container rel", hybrid, hybridCgroup, "capsule-oci/capsule-1", []string{
			"/sys/fs/cgroup/cpu/capsule-oci/capsule-1",
			"/sys/fs/cgroup/cpuacct/capsule-oci/capsule-1",
			"/sys/fs/cgroup/memory/process_api/x/capsule-oci/capsule-1",
			"/sys/fs/cgroup/pids/capsule-oci/capsule-1",
			"/sys/fs/cgroup/systemd/capsule-oci/capsule-1",
			"/sys/fs/cgroup/unified/capsule-oci/capsule-1",
		}},
		{"exact membership of a container's init", hybrid,
			"8:pids:/capsule-oci/c\n4:memory:/process_api/x/capsule-oci/c\n0::/capsule-oci/c\n", "", []string{
				"/sys/fs/cgroup/memory/process_api/x/capsule-oci/c",
				"/sys/fs/cgroup/pids/capsule-oci/c",
				"/sys/fs/cgroup/unified/capsule-oci/c",
			}},
		{"comounted, one dir", ParseMounts([]byte("33 30 0:30 / /cg/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n33 30 0:30 / /cg/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n")),
			"2:cpu,cpuacct:/a\n", "b", []string{"/cg/cpu,cpuacct/a/b"}},
		{"mount root inside and outside the membership", []Mount{{Dir: "/m", Root: "/pod", V2: true}, {Dir: "/n", Root: "/other", Controllers: []string{"pids"}}},
			"8:pids:/pod/c\n0::/pod/c\n", "", []string{"/m/c"}},
		{"unmounted hierarchy, no membership", hybrid, "5:devices:/\n", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Dirs(tc.mounts, ParseProcCgroup([]byte(tc.cgroup)), tc.rel)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Dirs =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// On the machines this runs on a hierarchy is mounted, so this process has
// a cgroup directory, and it exists.
func TestSelfDirs(t *testing.T) {
	dirs := SelfDirs("")
	if len(dirs) == 0 {
		t.Fatal("no cgroup directory for this process")
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", d, err)
		}
	}
	if Membership("self") == nil || Membership("0") != nil || ProcDirs(nil, "0", "") != nil {
		t.Error("the membership of this process, or of no process, is wrong")
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestOOMKillsAndUsage(t *testing.T) {
	root := writeFiles(t, map[string]string{
		"v1mem/memory.oom_control":         "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"v1mem/memory.max_usage_in_bytes":  "4096\n",
		"v1cpu/cpuacct.usage":              "1500\n",
		"v2/memory.events":                 "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
		"v2/cpu.stat":                      "usage_usec 7\nuser_usec 5\n",
		"v2/memory.peak":                   "8192\n",
		"v2only/cpu.stat":                  "usage_usec 7\n",
		"v2only/memory.peak":               "8192\n",
		"broken/memory.events":             "oom_kill many\n",
		"broken/memory.max_usage_in_bytes": "x\n",
	})
	d := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, filepath.Join(root, n))
		}
		return out
	}
	i64 := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name string
		dirs []string
		oom  int64
		use  Usage
	}{
		{"v1 then v2: first figure wins, kills add", d("v1mem", "v1cpu", "v2"), 3, Usage{CPUNS: i64(1500), MemoryPeak: i64(4096)}},
		{"v2 only: usec to ns", d("v2only"), 0, Usage{CPUNS: i64(7000), MemoryPeak: i64(8192)}},
		{"unreadable figures are unknown", d("broken", "missing"), 0, Usage{}},
		{"none", nil, 0, Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OOMKillsIn(tc.dirs); got != tc.oom {
				t.Errorf("OOMKillsIn = %d, want %d", got, tc.oom)
			}
			if got := UsageIn(tc.dirs); !reflect.DeepEqual(got, tc.use) {
				t.Errorf("UsageIn = %s, want %s", show(got), show(tc.use))
			}
		})
	}
}

func show(u Usage) string {
	f := func(p *int64) string {
		if p == nil {
			return "nil"
		}
		return strconv.FormatInt(*p, 10)
	}
	return "{cpu " + f(u.CPUNS) + " peak " + f(u.MemoryPeak) + "}"
}

func TestRemoveDirs(t *testing.T) {
	root := writeFiles(t, map[string]string{"full/file": "x"})
	for _, n := range []string{"empty", "parent/runsc-1", "parent/runsc-2/child", "parent/capsule-1"} {
		if err := os.MkdirAll(filepath.Join(root, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	err := RemoveDirs([]string{filepath.Join(root, "empty"), filepath.Join(root, "missing"), filepath.Join(root, "full")})
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != filepath.Join(root, "full") {
		t.Fatalf("RemoveDirs: %v, want one failure for the populated dir", err)
	}
	if _, err := os.Stat(filepath.Join(root, "empty")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty dir still there: %v", err)
	}
	RemoveEmptyChildren([]string{filepath.Join(root, "parent"), filepath.Join(root, "missing")}, "runsc-")
	ents, _ := os.ReadDir(filepath.Join(root, "parent"))
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"capsule-1", "runsc-2"}; !reflect.DeepEqual(left, want) {
		t.Fatalf("left %v, want %v (only empty runsc- children go)", left, want)
	}
}

// FuzzParseMounts: any table parses without panic, and what comes out is
// well formed: a v2 hierarchy has no controllers, a v1 one has some, and
// Dirs over it stays under the mount points.
func FuzzParseMounts(f *testing.F) {
	f.Add([]byte(hybridMountinfo), []byte(hybridCgroup))
	f.Add([]byte(`50 40 0:37 /kubepods/pod1 /mnt/cg\040x rw - cgroup2 cgroup2 rw`), []byte("0::/kubepods/pod1/c\n"))
	f.Add([]byte("1 2 3 - cgroup\n - - \n"), []byte("::\n"))
	f.Fuzz(func(t *testing.T, mountinfo, cgroup []byte) {
		mounts := ParseMounts(mountinfo)
		for _, m := range mounts {
			if m.V2 != (len(m.Controllers) == 0) {
				t.Fatalf("mount %+v: v2 %v with controllers %v", m, m.V2, m.Controllers)
			}
		}
		dirs := Dirs(mounts, ParseProcCgroup(cgroup), "")
		for i, d := range dirs {
			if i > 0 && dirs[i-1] >= d {
				t.Fatalf("Dirs not sorted and unique: %q", dirs)
			}
		}
	})
}

package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseProcCgroup(t *testing.T) {
	in := "9:name=systemd:/\n4:memory:/process_api/x\n2:cpu,cpuacct:/a\n0::/capsule-host/h1-2-z\n"
	want := map[string]string{"name=systemd": "/", "memory": "/process_api/x", "cpu": "/a", "cpuacct": "/a", "": "/capsule-host/h1-2-z"}
	if got := ParseProcCgroup([]byte(in)); !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseProcCgroup = %v", got)
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		root, p, rel string
		ok           bool
	}{
		{"/", "/a/b", "/a/b", true},
		{"/a", "/a/b", "/b", true},
		{"/a", "/a", "/", true},
		{"/a", "/ab", "", false},
	} {
		rel, ok := within(tc.root, tc.p)
		if rel != tc.rel || ok != tc.ok {
			t.Errorf("within(%q, %q) = %q %v", tc.root, tc.p, rel, ok)
		}
	}
	if got := unescape(`/a\040b`); got != "/a b" {
		t.Errorf("unescape = %q", got)
	}
}

// On the machines this runs on (CI and dev, as root), a hierarchy must be
// found; on this hybrid machine both v2 and the v1 memory/pids ones.
func TestDetect(t *testing.T) {
	s, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if s.V2 == "" && len(s.V1) == 0 {
		t.Fatal("no cgroup hierarchy found")
	}
	t.Logf("v2 %q (controllers %v), v1 %v", s.V2, s.V2Controllers, s.V1)
}

// A limit no hierarchy can enforce is a *LimitError naming the controller
// and wrapping ErrUnsupported (no cgroup is touched: the System has none).
func TestLimitErrorUnsupported(t *testing.T) {
	s := &System{V1: map[string]string{}, V1Paths: map[string]string{}, V2Controllers: map[string]bool{}}
	for _, tc := range []struct {
		lim  Limits
		ctrl string
	}{
		{Limits{MemoryBytes: 1 << 20}, "memory"},
		{Limits{Pids: 8}, "pids"},
	} {
		g, err := s.NewGroup("t", tc.lim)
		var le *LimitError
		if g != nil || !errors.As(err, &le) || le.Controller != tc.ctrl || !errors.Is(err, ErrUnsupported) {
			t.Fatalf("NewGroup(%+v) = %v, %v; want a %s LimitError wrapping ErrUnsupported", tc.lim, g, err, tc.ctrl)
		}
	}
}

// A limit file that cannot be written is a *LimitError too, wrapping the
// write error, not ErrUnsupported. A plain directory stands in for the v1
// hierarchy: mkdir works there, and opening pids.max (never created) fails.
func TestLimitErrorWriteFails(t *testing.T) {
	root := t.TempDir()
	s := &System{V1: map[string]string{"pids": root}, V1Paths: map[string]string{"pids": "/"}, V2Controllers: map[string]bool{}}
	g, err := s.NewGroup("t", Limits{Pids: 8})
	var le *LimitError
	if g != nil || !errors.As(err, &le) || le.Controller != "pids" || errors.Is(err, ErrUnsupported) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("NewGroup = %v, %v; want a pids LimitError wrapping ErrNotExist", g, err)
	}
	// The failed group was removed again.
	if _, err := os.Stat(filepath.Join(root, Parent, "t")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leaf left behind: %v", err)
	}
}

// A group keeps its cgroup.procs and cpu.stat open between reads (pooled
// groups are read at every settlement) until Idle; from then on a read
// opens and closes its file, so the keeper holds no descriptor per live
// group however often its processes' status is read. A plain directory
// stands in for the v2 leaf.
func TestIdleGroupKeepsNoDescriptor(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("11\n12\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte("usage_usec 1500\nuser_usec 1000\n"), 0o600)
	g := &Group{V2Dir: dir, fd: -1, procsFD: -1, cpuStatFD: -1}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	read := func() {
		t.Helper()
		if ps, err := g.Procs(); err != nil || !reflect.DeepEqual(ps, []int{11, 12}) {
			t.Fatalf("Procs = %v, %v", ps, err)
		}
		if d, ok := g.CPUTime(); !ok || d.Microseconds() != 1500 {
			t.Fatalf("CPUTime = %v, %v", d, ok)
		}
	}
	before := fds()
	read()
	if n := fds() - before; n != 2 {
		t.Fatalf("a busy group holds %d descriptors after its reads, want its 2 cached files", n)
	}
	g.Idle()
	if n := fds() - before; n != 0 {
		t.Fatalf("Idle left %d descriptors", n)
	}
	for range 3 {
		read()
	}
	if n := fds() - before; n != 0 {
		t.Fatalf("an idle group holds %d descriptors after its reads, want none", n)
	}
}

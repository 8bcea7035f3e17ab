package cgroups

import (
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

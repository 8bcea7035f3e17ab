//go:build !leanclient

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unitCgroup stands in for the cgroup systemd gives a service: one
// directory in each hierarchy a service manager tracks and kills by (the
// v2 tree, v1's name=systemd), below this test's own cgroup there.
// `systemctl stop` of a unit with the default KillMode=control-group
// signals every process in it (stop): the keepers must not be there.
type unitCgroup struct {
	dirs []string
}

// newUnitCgroup makes the directories, or returns nil (said loudly)
// where this test cannot: not root, or no such hierarchy.
func newUnitCgroup(t *testing.T) *unitCgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("SKIP LOUDLY: not root: no service cgroup to stop (plain SIGTERM instead)")
		return nil
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	own := procCgroups("self")
	u := &unitCgroup{}
	name := fmt.Sprintf("capsule-test-unit-%d", time.Now().UnixNano())
	sc := bufio.NewScanner(bytes.NewReader(mi))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if !ok || len(pf) < 5 || len(qf) < 3 || pf[3] != "/" {
			continue
		}
		key := ""
		switch {
		case qf[0] == "cgroup2":
		case qf[0] == "cgroup" && strings.Contains(","+qf[2]+",", ",name=systemd,"):
			key = "name=systemd"
		default:
			continue
		}
		if p, ok := own[key]; ok {
			u.dirs = append(u.dirs, filepath.Join(pf[4], p, name))
		}
	}
	if len(u.dirs) == 0 {
		t.Log("SKIP LOUDLY: no v2 or name=systemd hierarchy: no service cgroup to stop (plain SIGTERM instead)")
		return nil
	}
	for _, d := range u.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("service cgroup: %v", err)
		}
	}
	t.Cleanup(func() {
		u.killAll()
		for _, d := range u.dirs {
			// The daemon's own leaves' parent (capsule-host/) first.
			var tree []string
			filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					tree = append(tree, p)
				}
				return nil
			})
			for i := len(tree) - 1; i >= 0; i-- {
				for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					if err := syscall.Rmdir(tree[i]); err == nil || time.Now().After(end) {
						break
					}
				}
			}
		}
	})
	return u
}

// wrap returns an executable that joins the unit's cgroups and execs
// bin: serve then starts inside the "service", as systemd starts it.
func (u *unitCgroup) wrap(t *testing.T, dir, bin string) string {
	t.Helper()
	var sb strings.Builder
	sb.WriteString("#!/bin/sh\n")
	for _, d := range u.dirs {
		fmt.Fprintf(&sb, "echo $$ > %q || exit 97\n", filepath.Join(d, "cgroup.procs"))
	}
	fmt.Fprintf(&sb, "exec %q \"$@\"\n", bin)
	w := filepath.Join(dir, fmt.Sprintf("in-unit-%d.sh", time.Now().UnixNano()))
	if err := writeExecutable(w, []byte(sb.String())); err != nil {
		t.Fatal(err)
	}
	return w
}

// pids lists every process in the unit's cgroups and below.
func (u *unitCgroup) pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range u.dirs {
		filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

func (u *unitCgroup) killAll() {
	for _, pid := range u.pids() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// stop is `systemctl stop` of the unit with KillMode=control-group:
// SIGTERM to every process in its cgroup at once, then, once the main
// process (serve) has exited, SIGKILL to whatever is left (systemd's
// final kill, without its timeout), until the cgroup is empty.
func (u *unitCgroup) stop(t *testing.T, d *daemonProc) {
	t.Helper()
	pids := u.pids()
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	select {
	case <-d.exited:
	case <-time.After(90 * time.Second):
		t.Fatal("serve did not exit within 90 s of the unit's SIGTERM")
	}
	if d.err != nil {
		t.Fatalf("serve exited with %v after SIGTERM", d.err)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left := u.pids()
		if len(left) == 0 {
			t.Logf("service cgroup stopped: SIGTERM to %d processes, then SIGKILL to what was left", len(pids))
			return
		}
		u.killAll()
		if time.Now().After(end) {
			t.Fatalf("the service cgroup is not empty 30 s after SIGKILL: %v", left)
		}
	}
}

package keeper_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// TestKeeperOwnCgroup: a keeper leaves its starter's cgroup in the
// hierarchies a service manager kills by (v2, v1's name=systemd) for a
// group of its own beside it, so `systemctl stop` of the starter's unit
// with KillMode=control-group reaches neither the keeper nor the
// processes it holds, which are made under the keeper's group. The v1
// controller hierarchies keep the starter's cgroup (an outer limit still
// applies). A clean exit removes the group.
func TestKeeperOwnCgroup(t *testing.T) {
	mounts, err := cgroups.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	dir := newDir(t)
	cfg := keeper.Config{Dir: dir, FrameTimeout: 2 * time.Second}
	plan := cgroups.OwnGroups(mounts, cgroups.Membership("self"), keeper.CgroupName(cfg))
	if len(plan) == 0 {
		t.Skip("SKIP LOUDLY: no v2 or name=systemd hierarchy: nothing a service manager kills by")
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIP LOUDLY: moving to a group beside this process's cgroup needs root or a delegated parent")
	}
	p := startKeeper(t, dir)
	kdirs := cgroups.ProcDirs(mounts, strconv.Itoa(p.PID), "")
	for _, pl := range plan {
		if !slices.Contains(kdirs, pl.Dir) {
			t.Fatalf("keeper in %v, want %s (beside the starter's %s)", kdirs, pl.Dir, pl.From)
		}
		if slices.Contains(kdirs, pl.From) {
			t.Fatalf("keeper still in its starter's cgroup %s", pl.From)
		}
	}
	self := cgroups.Membership("self")
	kmember := cgroups.Membership(strconv.Itoa(p.PID))
	for ctrl, path := range self {
		if ctrl == "memory" || ctrl == "pids" { // the limit hierarchies stay
			if kmember[ctrl] != path {
				t.Errorf("%s: keeper in %q, its starter in %q: the v1 controller hierarchies must not move", ctrl, kmember[ctrl], path)
			}
		}
	}

	c := dial(t, dir)
	ctx := ctxT(t, 60*time.Second)
	marker := filepath.Base(dir)
	st, err := c.Start(ctx, spec(marker, "/bin/sh", "-c", "exec /bin/sleep 1000", marker))
	if err != nil {
		t.Fatal(err)
	}
	pdirs := cgroups.ProcDirs(mounts, strconv.Itoa(st.PID), "")
	for _, pl := range plan {
		if !slices.ContainsFunc(pdirs, func(d string) bool { return d == pl.Dir || strings.HasPrefix(d, pl.Dir+"/") }) {
			t.Fatalf("the keeper's process is in %v, not in or under the keeper's group %s", pdirs, pl.Dir)
		}
	}
	if err := c.Shutdown(ctx, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("the keeper did not exit after stop_all")
	}
	for _, pl := range plan {
		if _, err := os.Stat(pl.Dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the keeper's clean exit: %v, want it removed", pl.Dir, err)
		}
	}
}

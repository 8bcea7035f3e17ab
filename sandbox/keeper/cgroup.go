package keeper

import (
	"fmt"
	"os"

	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
)

// CgroupName is the keeper's own cgroup under capsule-host-keepers/
// (cgroups.KeeperGroup: the backend's name and a hash of the directory).
func CgroupName(cfg Config) string {
	name := cfg.Name
	if name == "" {
		name = "keeper" // withDefaults' name
	}
	return cgroups.KeeperGroup(name, cfg.Dir)
}

// ownCgroup moves the keeper process out of its starter's cgroup, before
// it builds its backend (whose leaves go under the keeper's own cgroup):
// `systemctl stop` of a daemon's unit with KillMode=control-group kills
// every process in the unit's cgroup, and the keeper and its processes
// must not be among them (RFC §16, "what survives what"). Where the move
// is not allowed the keeper stays and says so in its log; the shipped
// unit (docs/systemd) has KillMode=process for that case. The returned
// function, called at a clean exit, removes the groups again.
func ownCgroup(cfg Config) func() {
	moved, err := cgroups.MoveOut(CgroupName(cfg))
	for _, pl := range moved {
		fmt.Fprintf(os.Stderr, "keeper[%d]: cgroup %s (the starter's was %s)\n", os.Getpid(), pl.Dir, pl.From)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "keeper[%d]: stays in its starter's cgroup where it cannot leave it (a service manager stopping the daemon's cgroup would end it): %v\n", os.Getpid(), err)
	}
	return func() { cgroups.Leave(moved) }
}

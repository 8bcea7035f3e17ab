package procfs

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// Footprint is what a server process costs: resident memory, open
// descriptors and threads. The benchmarks compare ours (daemon, keeper)
// with a tmux server's from these three numbers.
type Footprint struct {
	RSSKiB, FDs, Threads int
}

// ReadFootprint reads /proc/<pid>/status and /proc/<pid>/fd.
func ReadFootprint(pid int) (Footprint, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Footprint{}, err
	}
	defer f.Close()
	var fp Footprint
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ":")
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch k {
		case "VmRSS":
			fp.RSSKiB = n
		case "Threads":
			fp.Threads = n
		}
	}
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return Footprint{}, err
	}
	fp.FDs = len(ents)
	return fp, nil
}

// Add is the sum of two footprints (a daemon and its keeper).
func (a Footprint) Add(b Footprint) Footprint {
	return Footprint{RSSKiB: a.RSSKiB + b.RSSKiB, FDs: a.FDs + b.FDs, Threads: a.Threads + b.Threads}
}

//go:build !leanclient

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// A fleet is TestDurableRestart's processes: local, bwrap and OCI ones in
// one daemon, each backend served by two copies of bundled modules: a
// shell capsule (counters and cats, spawn_background_process) and testcap
// (exiters, spawn_persistent: its poll_events shows their exited events).

// fleetCaps are the capsules of each backend.
var fleetCaps = map[string]struct{ shell, tc string }{
	"local": {"shelllocal", "tclocal"},
	"bwrap": {"shell", "tcbwrap"},
	"oci":   {"shelloci", "tcoci"},
}

// fleetKinds is the order processes are spawned and reported in.
var fleetKinds = []string{"local", "bwrap", "oci"}

// fleetProc is one process of a fleet.
type fleetProc struct {
	kind, role         string // role: counter, exiter or cat
	capsule, principal string
	id                 string
}

func (p *fleetProc) String() string {
	return fmt.Sprintf("%s %s of %s (%s)", p.kind, p.role, p.principal, p.capsule)
}

// fleetConfig writes dir's config serving every backend of mix, and
// returns mix as it can run here: without root, runc or busybox the OCI
// share goes to local, said loudly in the log.
func fleetConfig(t *testing.T, dir string, mix map[string]int) map[string]int {
	t.Helper()
	mix = map[string]int{"local": mix["local"], "bwrap": mix["bwrap"], "oci": mix["oci"]}
	root, why := ociMissing()
	if why != "" && mix["oci"] > 0 {
		t.Logf("SKIP LOUDLY: no OCI share (%s): its %d processes run on local", why, mix["oci"])
		mix["local"] += mix["oci"]
		mix["oci"] = 0
	}
	var caps, enabled []string
	oci := ""
	for _, k := range fleetKinds {
		if mix[k] == 0 {
			continue
		}
		enabled = append(enabled, strconv.Quote(k))
		if k == "bwrap" {
			shell, err := filepath.Abs("../../capsules/shell")
			if err != nil {
				t.Fatal(err)
			}
			caps = append(caps, strconv.Quote(shell))
		} else {
			caps = append(caps, strconv.Quote(capsuleVariant(t, dir, "shell", fleetCaps[k].shell, k)))
		}
		caps = append(caps, strconv.Quote(capsuleVariant(t, dir, "testcap", fleetCaps[k].tc, k)))
		if k == "oci" {
			oci = ociConfig(t, dir, root)
		}
	}
	cfg := fmt.Sprintf("bundled = false\ncapsules = [%s]\n[quotas]\nmax_concurrent = 64\nmax_retained = 64\nmax_entries = 512\n[backends]\nenabled = [%s]\n%s",
		strings.Join(caps, ", "), strings.Join(enabled, ", "), oci)
	if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return mix
}

// fleetScripts are the commands of a fleet marked with mark: a counter
// printing "MARK n" every 50 ms (bash's read -t on a FIFO it holds open
// both ways waits without a fork: 100 counters forking sleep 20 times a
// second would be 2,000 execs a second, a load that tests the machine,
// not the keeper; busybox in the OCI image has no bash and forks; the
// FIFO's name is random, as $$ is the same in every bwrap sandbox (a PID
// namespace each) and a principal's counters share a workspace: a clash
// failed mkfifo and the counter spun without a tick, printing gigabytes
// that took a loaded CI run 14 minutes to read back), and an
// exiter that counts every 200 ms until exit-now appears in its
// workspace (its cwd: a sandbox sees nothing else of the host), then
// exits 7.
func fleetScripts(mark, kind string) (counter, exiter string) {
	counter = fmt.Sprintf(`exec bash -c 'f=.tick-$$-$RANDOM$RANDOM; { mkfifo $f && exec 9<>$f && rm $f; } || exit 9; i=0; while true; do i=$((i+1)); echo "%s $i"; read -t 0.05 -u 9; done'`, mark)
	if kind == "oci" {
		counter = fmt.Sprintf(`i=0; while true; do i=$((i+1)); echo "%s $i"; sleep 0.05; done`, mark)
	}
	exiter = fmt.Sprintf(`i=0; while [ ! -e exit-now ]; do i=$((i+1)); echo "%s $i"; sleep 0.2; done; exit 7`, mark)
	return counter, exiter
}

// spawnFleet starts mix's processes, per backend one cat (stdin kept
// open), about one exiter in 20 (at least one) and counters, over four
// principals.
func spawnFleet(t *testing.T, c *api.Client, mix map[string]int, mark string) []*fleetProc {
	t.Helper()
	var ps []*fleetProc
	for _, k := range fleetKinds {
		n := mix[k]
		if n == 0 {
			continue
		}
		counter, exiter := fleetScripts(mark, k)
		exiters := max(1, n/20)
		for i := range n {
			p := &fleetProc{kind: k, role: "counter", capsule: fleetCaps[k].shell, principal: fmt.Sprintf("p%d", len(ps)%4)}
			tool, in := "spawn_background_process", map[string]any{"command": counter}
			switch {
			case i == 0:
				p.role, in = "cat", map[string]any{"command": "cat", "keep_stdin_open": true}
			case i <= exiters:
				p.role, p.capsule, tool = "exiter", fleetCaps[k].tc, "spawn_persistent"
				in = map[string]any{"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", exiter}}}
			}
			m, code := capsuleCall(t, c, p.capsule, p.principal, tool, in)
			if p.id, _ = m["id"].(string); p.role == "exiter" {
				p.id, _ = m["ok"].(string)
			}
			if code != "" || p.id == "" {
				t.Fatalf("spawn %v: %q %v", p, code, m)
			}
			ps = append(ps, p)
		}
	}
	return ps
}

// fleetCursor is a read cursor of one counter per backend, issued before
// the restart after at least 3 lines.
type fleetCursor struct {
	p      *fleetProc
	cursor string
	last   int
}

func fleetCursors(t *testing.T, c *api.Client, ps []*fleetProc, mark string) []fleetCursor {
	t.Helper()
	var out []fleetCursor
	for _, k := range fleetKinds {
		for _, p := range ps {
			if p.kind != k || p.role != "counter" {
				continue
			}
			fc := fleetCursor{p: p}
			for end := time.Now().Add(30 * time.Second); fc.last < 3; time.Sleep(100 * time.Millisecond) {
				m, code := capsuleCall(t, c, p.capsule, p.principal, "read_process_logs", map[string]any{"id": p.id, "stream": "stdout"})
				if code != "" {
					t.Fatalf("%v: read before the restart: %s", p, code)
				}
				s, _ := m["stdout"].(string)
				fc.cursor, _ = m["cursor"].(string)
				fc.last = counterLines(t, "before the restart", mark, s, 1)
				if time.Now().After(end) {
					t.Fatalf("%v printed %d lines in 30 s", p, fc.last)
				}
			}
			out = append(out, fc)
			break
		}
	}
	return out
}

// eventScope is one (testcap copy, principal) event log with exiters.
type eventScope struct{ capsule, principal string }

// pollEventsOnce is one poll_events call: the events and the next cursor.
func pollEventsOnce(t *testing.T, c *api.Client, sc eventScope, cursor float64, wait time.Duration) ([]map[string]any, float64) {
	t.Helper()
	m, code := capsuleCall(t, c, sc.capsule, sc.principal, "poll_events", map[string]any{"cursor": cursor, "max": 256, "timeout_ms": wait.Milliseconds()})
	b, _ := m["ok"].(map[string]any)
	if code != "" || b == nil {
		t.Fatalf("poll_events %v from %v: %q %v", sc, cursor, code, m)
	}
	next, _ := b["next"].(float64)
	var evs []map[string]any
	for _, e := range b["events"].([]any) {
		evs = append(evs, e.(map[string]any))
	}
	return evs, next
}

// eventCursors are the exiters' scopes' event cursors before the restart.
func eventCursors(t *testing.T, c *api.Client, ps []*fleetProc) map[eventScope]float64 {
	t.Helper()
	out := map[eventScope]float64{}
	for _, p := range ps {
		sc := eventScope{p.capsule, p.principal}
		if _, done := out[sc]; p.role == "exiter" && !done {
			_, out[sc] = pollEventsOnce(t, c, sc, 0, 0)
		}
	}
	return out
}

// checkExitedEvents: from each cursor issued before the restart, the
// scope's event log goes on (seqs rise past it) and holds the exited
// event of each of its exiters, which exited while no daemon ran: code 7,
// reason self-exit, and no event of a process the scope does not own.
func checkExitedEvents(t *testing.T, c *api.Client, ps []*fleetProc, cursors map[eventScope]float64) {
	t.Helper()
	for sc, cur := range cursors {
		want, mine := map[string]*fleetProc{}, map[string]bool{}
		for _, p := range ps {
			if p.capsule == sc.capsule && p.principal == sc.principal {
				mine[p.id] = true
				if p.role == "exiter" {
					want[p.id] = p
				}
			}
		}
		for end := time.Now().Add(30 * time.Second); len(want) > 0; {
			evs, next := pollEventsOnce(t, c, sc, cur, time.Second)
			for _, e := range evs {
				id, _ := e["id"].(string)
				if seq, _ := e["seq"].(float64); seq <= cur || !mine[id] {
					t.Fatalf("%v: event %v after cursor %v: a seq that went back, or another scope's process", sc, e, cur)
				}
				if e["kind"] != "exited" || want[id] == nil {
					continue
				}
				ex, _ := e["exit"].(map[string]any)
				info, _ := ex["exit"].(map[string]any)
				if info["exit_code"] != float64(7) || ex["reason"] != "self-exit" {
					t.Fatalf("%v: exited event %v, want exit code 7, self-exit", want[id], e)
				}
				delete(want, id)
			}
			cur = next
			if len(want) > 0 && time.Now().After(end) {
				t.Fatalf("%v: no exited event within 30 s for %d exiters", sc, len(want))
			}
		}
	}
}

var adoptedLine = regexp.MustCompile(`journal adopted"?.*? running=(\d+) exited=(\d+) lost=(\d+) unreadable=(\d+) orphans_terminated=(\d+)`)

// checkAdoptedAll counts the re-adoption explicitly: the new serve's
// report adopted every journaled process (running, or exited with its
// exit known) and lost, dropped or terminated none; the operator's list
// holds every ID of the fleet, the exiters exited with code 7, the others
// running.
func checkAdoptedAll(t *testing.T, c *api.Client, dir string, ps []*fleetProc) {
	t.Helper()
	all := adoptedLine.FindAllStringSubmatch(readDaemonLog(t, dir), -1)
	if len(all) == 0 {
		t.Fatal("no 'journal adopted' line in the daemon log")
	}
	n := func(i int) int { v, _ := strconv.Atoi(all[len(all)-1][i]); return v }
	if n(1)+n(2) != len(ps) || n(3)+n(4)+n(5) != 0 {
		t.Fatalf("the restart adopted: %s; want %d running or exited, none lost, unreadable or terminated", all[len(all)-1][0], len(ps))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list, err := c.Processes(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]api.Process{}
	for _, p := range list {
		byID[p.ID] = p
	}
	count := map[string]int{}
	for _, p := range ps {
		lp, ok := byID[p.id]
		switch {
		case !ok:
			t.Fatalf("%v: not in the list after the restart", p)
		case p.role != "exiter" && lp.Phase != "running":
			t.Fatalf("%v: %s after the restart, want running", p, lp.Phase)
		}
		count[p.kind]++
	}
	t.Logf("re-adopted %d/%d (local %d, bwrap %d, oci %d): %s", len(ps), len(ps), count["local"], count["bwrap"], count["oci"], all[len(all)-1][0])
}

// checkKeepersOwnCgroups: every keeper sits outside the daemon's cgroup
// in the hierarchies a service manager kills by (the v2 tree, v1's
// name=systemd), so `systemctl stop` of the daemon's unit does not reach
// it; skipped loudly where the keeper could not move (not root).
func checkKeepersOwnCgroups(t *testing.T, dir string, d *daemonProc) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("SKIP LOUDLY: not root: the keepers may stay in the daemon's cgroup")
		return
	}
	daemon := procCgroups(strconv.Itoa(d.cmd.Process.Pid))
	locks, _ := filepath.Glob(filepath.Join(dir, "state", "keeper", "*", "keeper.lock"))
	for _, l := range locks {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		pid := strings.Fields(string(b))[0]
		k := procCgroups(pid)
		for _, h := range []string{"", "name=systemd"} {
			if dp, ok := daemon[h]; ok && k[h] == dp {
				t.Fatalf("keeper %s (%s) is in the daemon's cgroup %q (hierarchy %q)", pid, l, dp, h)
			}
		}
	}
}

// procCgroups maps a process's hierarchies ("" for v2, else the v1
// controllers, "name=systemd" among them) to its cgroup paths.
func procCgroups(pid string) map[string]string {
	b, _ := os.ReadFile("/proc/" + pid + "/cgroup")
	m := map[string]string{}
	for _, ln := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(ln, ":", 3); len(f) == 3 {
			for _, c := range strings.Split(f[1], ",") {
				m[c] = f[2]
			}
		}
	}
	return m
}

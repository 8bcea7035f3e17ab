package local

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

// TestRootRegistrationSurvivesPIDReuse: the old root's removal, running
// after a new root got the same PID, must leave the new root registered
// (else the orphan scan reaps the new root's zombie).
func TestRootRegistrationSurvivesPIDReuse(t *testing.T) {
	r := &reaperState{roots: map[int]int{}, sessions: map[int]int{}, prefixes: map[string]int{}}
	const pid = 4242
	for _, step := range []struct {
		op   string
		want bool
	}{
		{"add", true},    // old root forked
		{"add", true},    // old root reaped, PID reused by a new root
		{"remove", true}, // the old root's settle goroutine catches up
		{"remove", false},
	} {
		if step.op == "add" {
			r.addRoot(pid)
		} else {
			r.removeRoot(pid)
		}
		if got := r.isRoot(pid); got != step.want {
			t.Fatalf("after %s: isRoot = %v, want %v", step.op, got, step.want)
		}
		if got := r.sessions[pid] > 0; got != step.want {
			t.Fatalf("after %s: session live = %v, want %v", step.op, got, step.want)
		}
	}
}

// TestLingeringSessionOwnership: the stragglers of a settled session stay
// the reaper's until the deadline, but never a process that leads a
// session with the reused ID, nor one in this process's own session.
func TestLingeringSessionOwnership(t *testing.T) {
	const sid = 4343
	r := &reaperState{roots: map[int]int{}, sessions: map[int]int{}, lingering: map[int]time.Time{}, prefixes: map[string]int{}, kick: make(chan struct{}, 1)}
	r.linger(sid)
	r.lingering[sid+1] = time.Now().Add(-time.Second) // expired
	r.lingering[mySID] = time.Now().Add(time.Minute)  // cannot be told from os/exec children
	for _, tc := range []struct {
		name string
		st   procfs.Stat
		want bool
	}{
		{"straggler of the settled tree", procfs.Stat{PID: 5000, SID: sid, State: 'Z'}, true},
		{"a new session leader with the reused ID", procfs.Stat{PID: sid, SID: sid, State: 'Z'}, false},
		{"expired", procfs.Stat{PID: 5001, SID: sid + 1, State: 'Z'}, false},
		{"this process's own session", procfs.Stat{PID: 5002, SID: mySID, State: 'Z'}, false},
		{"unknown session", procfs.Stat{PID: 5003, SID: sid + 2, State: 'Z'}, false},
	} {
		r.tabMu.Lock()
		got := r.ownsLingering(tc.st)
		r.tabMu.Unlock()
		if got != tc.want {
			t.Errorf("%s: ownsLingering = %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, ok := r.lingering[sid+1]; ok {
		t.Error("an expired lingering session is kept")
	}
}

// TestWatchedExitDuringCoalescePause: a watched root that exits while
// the loop pauses to coalesce SIGCHLDs before an orphan sweep is reported
// at its own SIGCHLD, not at the pause's end. The pause is an hour here,
// so a loop that slept through it fails the 30 s bound (a plain 5 ms
// sleep held back every such exit: the keeper's spawn+wait was 4x
// os/exec's). A child of the test stands in for the root: a cat that
// exits when its stdin closes, started without Wait, so it stays a
// zombie until the test reaps it. The signal channel is unbuffered: a
// send returns once the loop took it.
func TestWatchedExitDuringCoalescePause(t *testing.T) {
	r := &reaperState{roots: map[int]int{}, sessions: map[int]int{}, lingering: map[int]time.Time{}, prefixes: map[string]int{},
		watched: map[int]func(rootEvent){}, kick: make(chan struct{}, 1), pause: time.Hour, quit: make(chan struct{})}
	sigs := make(chan os.Signal)
	ended := make(chan struct{})
	go func() { r.loop(sigs); close(ended) }()
	defer func() { close(r.quit); <-ended }()
	cmd := exec.Command("/bin/cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait() // reaps the zombie whatever happens
	defer stdin.Close()
	got := make(chan rootEvent, 1)
	r.watchRoot(cmd.Process.Pid, func(ev rootEvent) { got <- ev })
	// A SIGCHLD while the root runs: the loop peeks (nothing exited),
	// then pauses.
	sigs <- syscall.SIGCHLD
	stdin.Close() // the root exits
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case ev := <-got:
			if ev.err != nil || ev.si.Code != 1 || ev.si.Status != 0 {
				t.Fatalf("reported %+v, want a clean exit", ev)
			}
			return
		case sigs <- syscall.SIGCHLD: // its exit's, until the peek sees the zombie
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the watched root's exit was not reported during the coalescing pause")
		}
	}
}

package local

import (
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

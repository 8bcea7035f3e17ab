package local

import "testing"

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

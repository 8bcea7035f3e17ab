package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExecSwapRunsChecked: the exec check is the exec. A guest points a
// workspace symlink named like an allowed program (true) at it, and swaps
// it with /bin/bash in a loop while spawning it. The check resolves the
// link; the backend must run the file the check resolved, never what the
// link reaches a moment later (the campaign against main: bash, not
// allowed, ran 3 times in 150).
func TestExecSwapRunsChecked(t *testing.T) {
	e := newEnv(t, nil)
	e.register("swap", func(p *CapsulePolicy) { p.Exec = []string{"/usr/bin/true"} })
	ctx := as("swap", "alice")
	// The principal's workspace exists once a spawn made it.
	if _, err := e.r.Spawn(ctx, SpawnRequest{Cmd: "/usr/bin/true"}); err != nil {
		t.Fatalf("spawn true: %v", err)
	}
	ws := filepath.Join(e.ws, "swap", "alice")
	link := filepath.Join(ws, "true")
	swap := func(target string) {
		tmp := link + ".new"
		os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			t.Error(err)
			return
		}
		if err := os.Rename(tmp, link); err != nil { // atomic: the link always exists
			t.Error(err)
		}
	}
	swap("/usr/bin/true")
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			swap("/bin/bash")
			swap("/usr/bin/true")
			n++
			// Point at true most of the time, so that most checks pass
			// and the swap to bash falls between a check and its exec.
			for t0 := time.Now(); time.Since(t0) < 50*time.Microsecond; {
			}
		}
	}()
	req := SpawnRequest{Cmd: link, Args: []string{"-c", "echo PWNED"}, Env: []EnvVar{{markerKey, e.marker}}}
	ran, denied, pwned := 0, 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ran < 200 && time.Now().Before(deadline); i++ {
		res, err := e.r.Spawn(ctx, req)
		switch {
		case err == nil:
			ran++
			if strings.Contains(string(res.Stdout), "PWNED") {
				pwned++
			}
		case errors.Is(err, ErrCapabilityDenied): // the check saw bash
			denied++
		case errors.Is(err, ErrInvalidInput): // the link moved between check and start: fails closed
			denied++
		default:
			t.Fatalf("spawn %d: %v", i, err)
		}
	}
	close(stop)
	n := <-swapped
	t.Logf("%d runs of the checked file, %d refusals, %d swaps", ran, denied, n)
	if pwned > 0 {
		t.Fatalf("/bin/bash, not in the exec list, ran %d times in %d spawns", pwned, ran+denied)
	}
	if ran == 0 || n == 0 {
		t.Fatalf("the race was not exercised: %d runs, %d swaps", ran, n)
	}
}

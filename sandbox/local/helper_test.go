package local_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox/internal/cgroups"
	"github.com/capsule-host/capsule-host/sandbox/local"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// eachHelper runs f through every exec helper this build has: the Go one
// and, with cgo, the C constructor (helper_cgo.go) that takes the role
// first. Both must behave the same.
func eachHelper(t *testing.T, f func(t *testing.T)) {
	t.Run("go", func(t *testing.T) {
		local.UseGoHelper(t)
		f(t)
	})
	if local.CHelper {
		t.Run("c", f)
	} else {
		t.Log("SKIP c: this build has no cgo, so no C helper (make purego)")
	}
}

// TestHelperImplementation: a process started as the exec helper is
// served by the C constructor where the build has cgo (the Go runtime
// never starts), by the Go helper otherwise.
func TestHelperImplementation(t *testing.T) {
	want := "0 go"
	if local.CHelper {
		want = "0 c"
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(reexec.Self)
	cmd.Args = []string{local.HelperArg0, "-impl", "x", "--", "/bin/true"}
	cmd.Env = []string{}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	cmd.ExtraFiles = []*os.File{w, null} // fd 3: status, fd 4: environment
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var got bytes.Buffer
	got.ReadFrom(r)
	if err := cmd.Wait(); err != nil || got.String() != want {
		t.Fatalf("helper -impl: %q (%v), want %q", got.String(), err, want)
	}
}

// TestHelperLimits: both helpers set the rlimits and join the v1 cgroups
// before the program's first instruction.
func TestHelperLimits(t *testing.T) {
	eachHelper(t, func(t *testing.T) {
		b := newBackend(t, local.Options{})
		sp := baseSpec(t, "ulimit -n; ulimit -t; cat /proc/self/cgroup")
		sp.Limits.OpenFiles = 37
		sp.Limits.CPUTime = 1500 * time.Millisecond // rounds up to 2 s
		sp.Limits.MemoryBytes = 256 << 20
		h, err := b.Start(bg(t), sp)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Cleanup(bg(t), h.Ref())
		if ex, err := h.Wait(bg(t)); err != nil || ex.Code != 0 {
			t.Fatalf("exit %+v, %v", ex, err)
		}
		c, _ := h.Stdout().ReadFrom(0, 1<<14)
		lines := strings.SplitN(string(c.Data), "\n", 3)
		if len(lines) < 3 || lines[0] != "37" || lines[1] != "2" {
			t.Fatalf("limits through the helper: %q, want 37 open files and 2 s of CPU", c.Data)
		}
		if s, err := cgroups.Detect(); err == nil && s.V1["memory"] != "" {
			if !strings.Contains(lines[2], ":memory:") || !strings.Contains(lines[2], "/"+cgroups.Parent+"/") {
				t.Fatalf("not in its v1 memory cgroup: %q", lines[2])
			}
		}
	})
}

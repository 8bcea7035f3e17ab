package local_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// busyScript writes a script that exits 7 and, while hold > 0, has a
// shell hold it open for writing for that long (as a child forked while
// the script was being written holds it until its own exec). It returns
// once the holder holds it; the holder is waited for by the cleanup.
func busyScript(t *testing.T, hold string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("/bin/sh", "-c", `exec 3>>"$0"; echo held; exec sleep "$1"`, path, hold)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	return path
}

// A program held open for writing a moment (ETXTBSY, "text file busy")
// is retried and runs; one held for good fails with ETXTBSY, typed.
// Directly and through both exec helpers.
func TestSpawnBusyProgram(t *testing.T) {
	t.Run("direct", func(t *testing.T) { spawnBusy(t, false) })
	t.Run("helper", func(t *testing.T) { eachHelper(t, func(t *testing.T) { spawnBusy(t, true) }) })
}

func spawnBusy(t *testing.T, helper bool) {
	b := newBackend(t, local.Options{})
	for _, tc := range []struct {
		hold string
		busy bool
	}{{"0.01", false}, {"30", true}} {
		sp := baseSpec(t, "")
		sp.Argv = []string{busyScript(t, tc.hold)}
		if helper {
			sp.Limits.OpenFiles = 64 // forces the exec helper
		}
		h, err := b.Start(bg(t), sp)
		if tc.busy {
			if !errors.Is(err, syscall.ETXTBSY) || !errors.Is(err, sandbox.ErrSpawn) {
				t.Errorf("held %s s: %v, want a spawn error of ETXTBSY", tc.hold, err)
			}
			if err == nil {
				h.Terminate(bg(t), sandbox.Force)
				h.Release()
			}
			continue
		}
		if err != nil {
			t.Fatalf("held %s s: %v, want it retried and run", tc.hold, err)
		}
		ex, err := h.Wait(bg(t))
		h.Release()
		if err != nil || ex.Code != 7 {
			t.Fatalf("held %s s: %+v %v, want exit code 7", tc.hold, ex, err)
		}
	}
}

// The same as an agent meets it: a script written and run at once while
// the host forks all the time (its writer's descriptor caught by those
// forks). Without the retry this failed in the first rounds in most runs
// here; TestSpawnBusyProgram is the deterministic form.
func TestSpawnJustWrittenScriptWhileForking(t *testing.T) {
	b := newBackend(t, local.Options{})
	testutil.Forking(t, 3)
	dir := t.TempDir()
	for i := range 100 {
		path := filepath.Join(dir, fmt.Sprintf("run-%d.sh", i))
		// A plain write, as a capsule's WASI write in the daemon is.
		if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 7\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		sp := baseSpec(t, "")
		sp.Argv = []string{path}
		h, err := b.Start(bg(t), sp)
		if err != nil {
			t.Fatalf("round %d: spawn the script just written: %v", i, err)
		}
		ex, err := h.Wait(bg(t))
		h.Release()
		if err != nil || ex.Code != 7 {
			t.Fatalf("round %d: %+v %v, want exit code 7", i, ex, err)
		}
	}
}

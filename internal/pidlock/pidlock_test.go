package pidlock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/capsule-host/capsule-host/internal/procfs"
)

func TestAcquireNamesTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := Acquire(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// flock belongs to the open file description: a second open of the
	// same file, even in this process, contends like another process.
	_, err = Acquire(path, nil)
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) || he.PID != os.Getpid() || he.Start != procfs.StartTime(os.Getpid()) || he.Stale {
		t.Fatalf("second Acquire: %v (%+v), want HeldError naming pid %d", err, he, os.Getpid())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Fatalf("record %q survives Close", b)
	}
	l, err = Acquire(path, nil)
	if err != nil {
		t.Fatalf("Acquire after Close: %v", err)
	}
	l.Close()
}

func TestAcquireRunsCheckAndRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	refused := errors.New("not ours")
	if _, err := Acquire(filepath.Join(dir, "a.lock"), func(*os.File) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("check error: %v", err)
	}
	os.Symlink(filepath.Join(dir, "a.lock"), filepath.Join(dir, "link.lock"))
	if _, err := Acquire(filepath.Join(dir, "link.lock"), nil); err == nil {
		t.Fatal("a symlinked lock file was followed")
	}
}

func TestHolder(t *testing.T) {
	for _, tc := range []struct {
		in    string
		pid   int
		start uint64
	}{{"12 34\n", 12, 34}, {"12\n", 0, 0}, {"", 0, 0}, {"-1 3", 0, 0}, {"x y", 0, 0}} {
		if pid, start := Holder([]byte(tc.in)); pid != tc.pid || start != tc.start {
			t.Errorf("Holder(%q) = %d %d, want %d %d", tc.in, pid, start, tc.pid, tc.start)
		}
	}
}

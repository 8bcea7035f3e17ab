package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

func TestWrite(t *testing.T) {
	for _, o := range []Options{{}, {NoSync: true}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		if err := Write(path, []byte("one"), 0o600, o); err != nil {
			t.Fatal(err)
		}
		if err := Write(path, []byte("two"), 0o640, o); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		fi, _ := os.Stat(path)
		if string(b) != "two" || err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("%+v: content %q %v mode %v, want two 0640", o, b, err, fi.Mode())
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Fatalf("%+v: dir holds %v, want f alone", o, ents)
		}
		if err := Write(filepath.Join(dir, "missing", "f"), nil, 0o600, o); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%+v: write into a missing dir: %v, want ErrNotExist", o, err)
		}
		if err := SyncFile(path); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteNoClobber(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := Write(path, []byte("first"), 0o600, Options{NoClobber: true}); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("second"), 0o600, Options{NoClobber: true}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second creator: %v, want ErrExist", err)
	}
	b, _ := os.ReadFile(path)
	ents, _ := os.ReadDir(dir)
	if string(b) != "first" || len(ents) != 1 {
		t.Fatalf("content %q, dir %v: want first, key alone", b, ents)
	}
}

// An executable written with Exec runs at once even while other
// goroutines fork and exec all the time: no child forked meanwhile holds
// its write descriptor (which would make the exec fail with ETXTBSY). A
// plain Write fails this within a few hundred rounds here.
func TestWriteExecWhileForking(t *testing.T) {
	dir := t.TempDir()
	testutil.Forking(t, 3)
	script := []byte("#!/bin/sh\nexit 7\n")
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 300 && time.Now().Before(deadline); i++ {
		path := filepath.Join(dir, fmt.Sprintf("run-%d.sh", i))
		if err := Write(path, script, 0o755, Options{NoSync: true, Exec: true}); err != nil {
			t.Fatal(err)
		}
		err := exec.Command(path).Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
			t.Fatalf("round %d: run the script just written: %v, want exit status 7", i, err)
		}
	}
}

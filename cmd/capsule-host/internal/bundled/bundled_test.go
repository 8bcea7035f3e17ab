package bundled

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"
)

func TestExtract(t *testing.T) {
	fsys := fstest.MapFS{
		"shell/Capsule.toml": {Data: []byte("[capsule]\n")},
		"shell/shell.wasm":   {Data: []byte("\x00asm")},
		"notacapsule/x.txt":  {Data: []byte("x")},
		"embed.go":           {Data: []byte("package capsules")},
	}
	if got := Names(fsys); len(got) != 1 || got[0] != "shell" {
		t.Fatalf("names %v", got)
	}
	dst := t.TempDir()
	dirs, err := Extract(fsys, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 1 || dirs[0] != filepath.Join(dst, "shell") {
		t.Fatalf("dirs %v", dirs)
	}
	p := filepath.Join(dst, "shell", "shell.wasm")
	st1, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st1.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st1.Mode())
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(p, old, old)
	if _, err := Extract(fsys, dst); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(p)
	if !st2.ModTime().Equal(old.Truncate(time.Second)) && st2.ModTime().After(old.Add(time.Minute)) {
		t.Fatal("unchanged file was rewritten")
	}
	if Names(nil) != nil {
		t.Fatal("nil fs has names")
	}
}

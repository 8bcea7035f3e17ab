package wazero_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
)

// versionDir is the directory wazero keeps its entries in.
func versionDir(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wazero-*-"+runtime.GOARCH+"-"+runtime.GOOS))
	if err != nil || len(m) != 1 {
		t.Fatalf("version dirs in %s: %v %v", dir, m, err)
	}
	return m[0]
}

// entries are wazero's cache files (not the guard's).
func entries(t *testing.T, sub string) []string {
	t.Helper()
	ents, err := os.ReadDir(sub)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// suiteRuns builds an engine on dir, compiles and runs the suite guest.
func suiteRuns(t *testing.T, dir string) {
	t.Helper()
	f := enginetest.NewFixture(t, wazero.New, engine.EngineConfig{CacheDir: dir})
	r, err := f.Inst.Call(context.Background(), "add", 2, 3)
	if err != nil || len(r) != 1 || r[0] != 5 {
		t.Fatalf("add(2,3) = %v, %v", r, err)
	}
}

// TestCacheDamagedEntries: an entry whose bytes changed anywhere (the
// function offsets wazero does not checksum, a truncation, the code),
// an entry the guard's index does not know, and a lost index are each
// deleted before wazero reads them: the module is recompiled, runs, and
// the rewritten entry is recorded again.
func TestCacheDamagedEntries(t *testing.T) {
	damage := map[string]func(t *testing.T, sub, entry string){
		"offsets": func(t *testing.T, sub, entry string) { flip(t, filepath.Join(sub, entry), 20) },
		"code":    func(t *testing.T, sub, entry string) { flip(t, filepath.Join(sub, entry), -40) },
		"truncated": func(t *testing.T, sub, entry string) {
			if err := os.Truncate(filepath.Join(sub, entry), 30); err != nil {
				t.Fatal(err)
			}
		},
		"unknown file": func(t *testing.T, sub, entry string) {
			b, _ := os.ReadFile(filepath.Join(sub, entry))
			os.Remove(filepath.Join(sub, entry))
			// The same bytes under a name the index never recorded.
			if err := os.WriteFile(filepath.Join(sub, strings.Repeat("ab", 32)), b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"lost index": func(t *testing.T, sub, entry string) {
			if err := os.WriteFile(filepath.Join(sub, ".capsule-index.json"), []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, hurt := range damage {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cache")
			suiteRuns(t, dir)
			sub := versionDir(t, dir)
			before := entries(t, sub)
			if len(before) == 0 {
				t.Fatal("no cache entry written")
			}
			entry := largest(t, sub, before)
			hurt(t, sub, entry)
			suiteRuns(t, dir)
			after := entries(t, sub)
			if len(after) != len(before) {
				t.Fatalf("entries %v after damage, %v before", after, before)
			}
			checkIndex(t, sub)
		})
	}
}

// TestCacheHit: a second engine on the same directory loads the entry
// (no file is rewritten).
func TestCacheHit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	suiteRuns(t, dir)
	sub := versionDir(t, dir)
	entry := largest(t, sub, entries(t, sub))
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(filepath.Join(sub, entry), old, old); err != nil {
		t.Fatal(err)
	}
	suiteRuns(t, dir)
	st, err := os.Stat(filepath.Join(sub, entry))
	if err != nil || !st.ModTime().Equal(old) {
		t.Fatalf("entry rewritten on a hit: %v %v", st, err)
	}
	checkIndex(t, sub)
}

// TestCacheRefusesUntrustedDirectories: a cache directory (or wazero's
// version directory in it) that another user owns, that group or others
// may write, or that is a symlink is refused with ErrUntrustedCache, and
// nothing is compiled from it. One others may only read is tightened to
// 0700 (nobody else could have put a file there).
func TestCacheRefusesUntrustedDirectories(t *testing.T) {
	cases := map[string]func(t *testing.T, dir string) string{
		"mode 0775": func(t *testing.T, dir string) string {
			mkdir(t, dir, 0o775)
			return dir
		},
		"mode 0703": func(t *testing.T, dir string) string {
			mkdir(t, dir, 0o703)
			return dir
		},
		"version dir 0770": func(t *testing.T, dir string) string {
			suiteRuns(t, dir)
			if err := os.Chmod(versionDir(t, dir), 0o770); err != nil {
				t.Fatal(err)
			}
			return dir
		},
		"symlink": func(t *testing.T, dir string) string {
			real := dir + ".real"
			mkdir(t, real, 0o700)
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
			return dir
		},
		"another owner": func(t *testing.T, dir string) string {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the directory to another uid (CI runs as root)")
			}
			mkdir(t, dir, 0o700)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return dir
		},
	}
	t.Run("mode 0755 tightened", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "cache")
		mkdir(t, dir, 0o755)
		suiteRuns(t, dir)
		for _, d := range []string{dir, versionDir(t, dir)} {
			if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
				t.Fatalf("%s: %v %v, want 0700", d, st.Mode(), err)
			}
		}
	})
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			dir := setup(t, filepath.Join(t.TempDir(), "cache"))
			_, err := wazero.New(context.Background(), engine.EngineConfig{CacheDir: dir}, enginetest.HostFuncs())
			if !errors.Is(err, wazero.ErrUntrustedCache) {
				t.Fatalf("New on %s: %v, want ErrUntrustedCache", name, err)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// flip inverts one byte at off (negative: from the end).
func flip(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += len(b)
	}
	b[off] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func largest(t *testing.T, sub string, names []string) string {
	t.Helper()
	best, size := "", int64(-1)
	for _, n := range names {
		st, err := os.Stat(filepath.Join(sub, n))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > size {
			best, size = n, st.Size()
		}
	}
	return best
}

// checkIndex: every entry file is in the guard's index.
func checkIndex(t *testing.T, sub string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sub, ".capsule-index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx map[string][]struct{ File string }
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, es := range idx {
		for _, e := range es {
			known[e.File] = true
		}
	}
	for _, n := range entries(t, sub) {
		if !known[n] {
			t.Fatalf("entry %s not in the index %s", n, b)
		}
	}
}

// BenchmarkCompileBundled: the bundled capsules' modules (4.4 MB Go
// guests) compiled cold, and from the guarded file cache (verify the
// entry's SHA-256, then wazero's load).
//
//	go test -run '^$' -bench CompileBundled -benchtime 3x ./host/engine/wazero/
func BenchmarkCompileBundled(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"shell", "mcp-stdio"} {
		wasm, err := os.ReadFile(filepath.Join("..", "..", "..", "capsules", name, name+".wasm"))
		if err != nil {
			b.Fatal(err)
		}
		compile := func(b *testing.B, dir string) {
			eng, err := wazero.New(ctx, engine.EngineConfig{CacheDir: dir}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close(ctx)
			if _, err := eng.Compile(ctx, wasm); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name+"/cold", func(b *testing.B) {
			for b.Loop() {
				compile(b, "")
			}
		})
		dir := b.TempDir()
		compile(b, dir)
		b.Run(name+"/cached", func(b *testing.B) {
			for b.Loop() {
				compile(b, dir)
			}
		})
	}
}

package hosttest

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

var buildMu sync.Mutex

// BuildGuest builds the Go guest package pkg (e.g. "./guest/full") with
// the standard toolchain (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared
// -trimpath) and returns the module bytes. modRoot is the abi-tests module
// root. Builds are cached in modRoot/.build (gitignored), keyed by the Go
// version and the content of every source under guest/ plus go.mod and
// go.sum, so a warm run costs no build.
func BuildGuest(t testing.TB, modRoot, pkg string) []byte {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	modRoot, err := filepath.Abs(modRoot)
	if err != nil {
		t.Fatal(err)
	}
	key, err := sourceKey(modRoot)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "_")
	cache := filepath.Join(modRoot, ".build", name+"-"+key[:16]+".wasm")
	if b, err := os.ReadFile(cache); err == nil {
		return b
	}
	if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := cache + ".tmp"
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", tmp, pkg)
	cmd.Dir = modRoot
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build guest %s: %v\n%s", pkg, err, out)
	}
	// Drop stale builds of this guest, then publish the new one.
	if old, _ := filepath.Glob(filepath.Join(modRoot, ".build", name+"-*.wasm")); len(old) > 0 {
		for _, o := range old {
			os.Remove(o)
		}
	}
	if err := os.Rename(tmp, cache); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sourceKey(modRoot string) (string, error) {
	h := sha256.New()
	io.WriteString(h, runtime.Version()+"\n")
	var files []string
	for _, f := range []string{"go.mod", "go.sum"} {
		files = append(files, filepath.Join(modRoot, f))
	}
	err := filepath.WalkDir(filepath.Join(modRoot, "guest"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".s")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		io.WriteString(h, f+"\n")
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

package wazero

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero"
)

// ErrUntrustedCache: the compilation cache directory (or a directory in
// it) is a symlink, not ours, or writable by group or others. wazero maps the
// files there as executable code after only a CRC32 of the code, so
// whoever can write that directory could run code in the host: the
// engine refuses to start rather than load them.
var ErrUntrustedCache = errors.New("wazero: compilation cache directory is not private to this user")

// Cache file names the guard keeps beside wazero's entries (wazero's are
// 64 hex digits, or <hex>.<n>.tmp while being written).
const (
	cacheIndexName = ".capsule-index.json"
	cacheLockName  = ".capsule-lock"
)

// cacheLockWait bounds the wait for another engine compiling into the
// same directory (a cold compile of a 4 MB Go guest takes seconds).
const cacheLockWait = 2 * time.Minute

// fileCache guards wazero's file cache (RFC §5, "the wazero cache").
// wazero checks only a CRC32 of the native code, not the offsets and
// tables around it, and a file it cannot decode fails the compile. So
// every compile runs under a lock, and a file reaches wazero only when
// the guard's index holds its SHA-256 from the compile that wrote it:
// an entry that does not match, and any file the index does not know,
// is deleted first, and wazero recompiles and rewrites it.
type fileCache struct {
	sub string // wazero's version directory, where its entries are
	mu  sync.Mutex
}

// cacheEntry is one file wazero wrote for a module.
type cacheEntry struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
}

// openFileCache checks dir, opens wazero's cache in it and checks the
// version directory wazero made there.
func openFileCache(dir string) (wazero.CompilationCache, *fileCache, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	if err := privateDir(dir); err != nil {
		return nil, nil, err
	}
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, nil, err
	}
	fc := &fileCache{sub: filepath.Join(dir, "wazero-"+wazeroVersion()+"-"+runtime.GOARCH+"-"+runtime.GOOS)}
	if err := privateDir(fc.sub); err != nil {
		_ = c.Close(context.Background())
		return nil, nil, err
	}
	return c, fc, nil
}

// privateDir accepts a real directory owned by this user that nobody
// else may write, and leaves it 0700.
func privateDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink", ErrUntrustedCache, dir)
	case !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrUntrustedCache, dir)
	case !ok || int(sys.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is not owned by uid %d (remove it, or set another cache directory)", ErrUntrustedCache, dir, os.Geteuid())
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s has mode %v: others could have written there (remove it, or chmod 700 it if you trust its files)", ErrUntrustedCache, dir, st.Mode().Perm())
	case st.Mode().Perm()&0o077 != 0:
		// Only readable by others: nobody else could write into it, so it
		// is tightened, not refused (t.TempDir and mkdir -p make 0755).
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUntrustedCache, dir, err)
		}
	}
	return nil
}

// wazeroVersion is the version wazero names its cache directory after
// (its internal/version, read the same way from the build info).
func wazeroVersion() string {
	v := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				v = d.Version
			}
		}
		if v == "" || v == "(devel)" {
			v = info.Main.Version
		}
	}
	if v == "" || v == "(devel)" {
		return "dev"
	}
	return v
}

// compile runs do, which compiles wasm through wazero, under the guard.
// A failure of the guard itself (lock, index) fails the compile: an
// unverified file must not reach wazero.
func (fc *fileCache) compile(ctx context.Context, wasm []byte, do func() (wazero.CompiledModule, error)) (wazero.CompiledModule, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	unlock, err := fc.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	sum := sha256.Sum256(wasm)
	key := hex.EncodeToString(sum[:])
	idx := fc.readIndex()
	before, err := fc.sweep(idx, key)
	if err != nil {
		return nil, err
	}
	cm, err := do()
	if err != nil {
		return nil, err
	}
	if err := fc.record(idx, key, before); err != nil {
		_ = cm.Close(ctx)
		return nil, err
	}
	return cm, nil
}

// lock takes the directory's flock, polling so that the wait is bounded
// by ctx and cacheLockWait.
func (fc *fileCache) lock(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(filepath.Join(fc.sub, cacheLockName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wazero: compilation cache lock: %w", err)
	}
	deadline := time.Now().Add(cacheLockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing drops the flock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("wazero: compilation cache lock: %w", err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("wazero: compilation cache %s: still locked by another compile after %v", fc.sub, cacheLockWait)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wazero: compilation cache lock: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// readIndex reads the index; a missing or unreadable one is empty, so
// every file is unknown and swept.
func (fc *fileCache) readIndex() map[string][]cacheEntry {
	idx := map[string][]cacheEntry{}
	b, err := os.ReadFile(filepath.Join(fc.sub, cacheIndexName))
	if err != nil || json.Unmarshal(b, &idx) != nil {
		return map[string][]cacheEntry{}
	}
	return idx
}

// sweep deletes every entry file the index does not know (or that is no
// regular file), then key's files when one no longer has its recorded
// SHA-256 (key's record is then dropped). It returns the files left.
func (fc *fileCache) sweep(idx map[string][]cacheEntry, key string) (map[string]bool, error) {
	known := map[string]bool{}
	for _, es := range idx {
		for _, e := range es {
			known[e.File] = true
		}
	}
	ents, err := os.ReadDir(fc.sub)
	if err != nil {
		return nil, fmt.Errorf("wazero: compilation cache: %w", err)
	}
	left := map[string]bool{}
	for _, d := range ents {
		n := d.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		if known[n] && d.Type().IsRegular() {
			left[n] = true
		} else if err := os.RemoveAll(filepath.Join(fc.sub, n)); err != nil {
			return nil, fmt.Errorf("wazero: compilation cache: %w", err)
		}
	}
	if !fc.intact(idx[key], left) {
		for _, e := range idx[key] {
			if err := os.Remove(filepath.Join(fc.sub, e.File)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("wazero: compilation cache: %w", err)
			}
			delete(left, e.File)
		}
		delete(idx, key)
	}
	return left, nil
}

// intact reports whether every file of a record is left and still has
// its recorded SHA-256.
func (fc *fileCache) intact(es []cacheEntry, left map[string]bool) bool {
	for _, e := range es {
		if !left[e.File] {
			return false
		}
		if ok, err := fileHasSum(filepath.Join(fc.sub, e.File), e.SHA256); err != nil || !ok {
			return false
		}
	}
	return true
}

// record adds the files the compile wrote to key's record and writes the
// index (a temporary file renamed over it).
func (fc *fileCache) record(idx map[string][]cacheEntry, key string, before map[string]bool) error {
	ents, err := os.ReadDir(fc.sub)
	if err != nil {
		return fmt.Errorf("wazero: compilation cache: %w", err)
	}
	added := false
	for _, d := range ents {
		n := d.Name()
		if before[n] || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".tmp") || !d.Type().IsRegular() {
			continue
		}
		s, err := fileSum(filepath.Join(fc.sub, n))
		if err != nil {
			return fmt.Errorf("wazero: compilation cache: %w", err)
		}
		idx[key] = append(idx[key], cacheEntry{File: n, SHA256: s})
		added = true
	}
	if !added {
		return nil
	}
	b, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(fc.sub, cacheIndexName+".*")
	if err != nil {
		return fmt.Errorf("wazero: compilation cache index: %w", err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(fc.sub, cacheIndexName))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("wazero: compilation cache index: %w", err)
	}
	return nil
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fileHasSum(path, want string) (bool, error) {
	got, err := fileSum(path)
	return got == want, err
}

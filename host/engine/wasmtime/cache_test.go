//go:build wasmtime

package wasmtime

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
)

// cachedFile compiles the suite guest once with dir as cache and returns
// the cache file's path and key.
func cachedFile(t *testing.T, dir string) (string, [32]byte) {
	t.Helper()
	f := enginetest.NewFixture(t, New, engine.EngineConfig{CacheDir: dir})
	if r, err := f.Inst.Call(context.Background(), "add", 2, 3); err != nil || r[0] != 5 {
		t.Fatalf("add: %v %v", r, err)
	}
	c := &moduleCache{dir: dir, config: configDigest()}
	path, key := c.key(enginetest.SuiteWasm)
	if _, err := c.load(path, key); err != nil {
		t.Fatalf("cache file not written or not valid: %v", err)
	}
	return path, key
}

// TestCacheRejectsAndReplaces: every damaged or foreign cache file is
// refused before wasmtime sees it (or refused by wasmtime when it carries
// our valid header), the module is recompiled, works, and the file is
// replaced by a valid one.
func TestCacheRejectsAndReplaces(t *testing.T) {
	dir := t.TempDir()
	path, key := cachedFile(t, dir)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	otherKey := key
	otherKey[0] ^= 0xff
	payload := good[cacheHeaderLen:]
	garbage := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 4096)
	tests := []struct {
		name string
		data []byte
		why  string // expected validate() refusal; "" = passes our header
	}{
		{"empty", nil, "bad magic"},
		{"garbage", garbage, "bad magic"},
		{"truncated", good[:len(good)/2], "header says"},
		{"bitflip", flip(good, len(good)-100), "checksum"},
		{"foreign key", encode(payload, otherKey), "another module"},
		// Our header, valid checksum, but not a wasmtime artifact: wasmtime's
		// own header check must refuse it without crashing.
		{"valid header, garbage payload", encode(garbage, key), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, verr := validate(tc.data, key)
			switch {
			case tc.why == "" && verr != nil:
				t.Fatalf("validate refused: %v", verr)
			case tc.why != "" && (!errors.Is(verr, errCacheInvalid) || !bytes.Contains([]byte(verr.Error()), []byte(tc.why))):
				t.Fatalf("validate = %v, want %q", verr, tc.why)
			}
			cachedFile(t, dir) // recompiles, runs, and rewrites a valid file
			now, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := validate(now, key); err != nil {
				t.Fatalf("file not replaced: %v", err)
			}
		})
	}
	// No temp files are left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".cwasm" || e.Name()[0] == '.' {
			t.Errorf("stray file in cache dir: %s", e.Name())
		}
	}
}

// TestCacheKeyCoversConfig: another engine config (or wasmtime version)
// never reads this one's file.
func TestCacheKeyCoversConfig(t *testing.T) {
	a := &moduleCache{dir: "/x", config: configDigest()}
	b := &moduleCache{dir: "/x", config: configDigest() + " other"}
	pa, ka := a.key([]byte("m"))
	pb, kb := b.key([]byte("m"))
	if pa == pb || ka == kb {
		t.Fatal("config digest does not change the cache key")
	}
	if _, k2 := a.key([]byte("n")); k2 == ka {
		t.Fatal("module bytes do not change the cache key")
	}
}

// TestCacheUnwritableDir: a cache that cannot be written never fails a
// compile.
func TestCacheUnwritableDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing", "dir")
	f := enginetest.NewFixture(t, New, engine.EngineConfig{CacheDir: dir})
	if r, err := f.Inst.Call(context.Background(), "add", 2, 3); err != nil || r[0] != 5 {
		t.Fatalf("add: %v %v", r, err)
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

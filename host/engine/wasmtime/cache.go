//go:build wasmtime

package wasmtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/bytecodealliance/wasmtime-go/v25"
)

// The module cache keeps wasmtime's serialized compiled modules (native
// code) in CacheDir. NewModuleDeserialize trusts its input: bytes that are
// not what this engine serialized may crash the process. So a cache file
// is never handed to wasmtime unless a header we wrote says it is ours:
//
//	magic     8 bytes  "CAPSWTC1"
//	key      32 bytes  sha256(module sha256, wasmtime version, config digest)
//	length    8 bytes  payload length, little endian
//	checksum 32 bytes  sha256(payload)
//	payload            Module.Serialize output
//
// A torn write, a truncated file, a file from another wasmtime version or
// engine config, or random garbage fails one of these checks and is
// recompiled and atomically replaced (temp file + rename).

const (
	cacheMagic     = "CAPSWTC1"
	cacheHeaderLen = 8 + 32 + 8 + 32
	// wasmtimeVersionFallback is used when the binary carries no module
	// build info (it always does for `go build`/`go test`).
	wasmtimeVersionFallback = "v25.0.0"
	wasmtimeModule          = "github.com/bytecodealliance/wasmtime-go/v25"
	// maxCacheFile bounds what is read back (a Go guest serializes to ~7 MB).
	maxCacheFile = 512 << 20
)

// wasmtimeVersion names the linked wasmtime-go, with its go.sum hash when
// known, so a replaced or patched module never reuses another's cache.
func wasmtimeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == wasmtimeModule {
				if d.Replace != nil {
					d = d.Replace
				}
				return d.Version + " " + d.Sum
			}
		}
	}
	return wasmtimeVersionFallback
}

// configDigest is every setting that changes generated code. Bump the
// "format" number whenever New changes the wasmtime.Config it builds.
func configDigest() string {
	return fmt.Sprintf("format=1 wasmtime=%s target=%s/%s epoch=1 fuel=0 threads=0", wasmtimeVersion(), runtime.GOOS, runtime.GOARCH)
}

type moduleCache struct {
	dir    string
	config string
}

func (c *moduleCache) key(wasm []byte) (path string, key [32]byte) {
	mod := sha256.Sum256(wasm)
	key = sha256.Sum256([]byte(hex.EncodeToString(mod[:]) + "\x00" + c.config))
	return filepath.Join(c.dir, hex.EncodeToString(mod[:])+"-"+hex.EncodeToString(key[:8])+".cwasm"), key
}

// errCacheInvalid marks a cache file that is not ours or not intact.
var errCacheInvalid = errors.New("wasmtime: module cache file rejected")

// load returns the validated serialized module for key, or an error: the
// file is missing (fs.ErrNotExist) or rejected (errCacheInvalid).
func (c *moduleCache) load(path string, key [32]byte) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() < cacheHeaderLen || st.Size() > maxCacheFile {
		return nil, fmt.Errorf("%w: %s: size %d", errCacheInvalid, path, st.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return validate(b, key)
}

func validate(b []byte, key [32]byte) ([]byte, error) {
	if len(b) < cacheHeaderLen || string(b[:8]) != cacheMagic {
		return nil, fmt.Errorf("%w: bad magic", errCacheInvalid)
	}
	if !bytes.Equal(b[8:40], key[:]) {
		return nil, fmt.Errorf("%w: written for another module, wasmtime version or engine config", errCacheInvalid)
	}
	n := binary.LittleEndian.Uint64(b[40:48])
	payload := b[cacheHeaderLen:]
	if n != uint64(len(payload)) {
		return nil, fmt.Errorf("%w: payload is %d bytes, header says %d", errCacheInvalid, len(payload), n)
	}
	if sum := sha256.Sum256(payload); !bytes.Equal(sum[:], b[48:80]) {
		return nil, fmt.Errorf("%w: payload checksum mismatch", errCacheInvalid)
	}
	return payload, nil
}

func encode(payload []byte, key [32]byte) []byte {
	out := make([]byte, cacheHeaderLen, cacheHeaderLen+len(payload))
	copy(out, cacheMagic)
	copy(out[8:], key[:])
	binary.LittleEndian.PutUint64(out[40:], uint64(len(payload)))
	sum := sha256.Sum256(payload)
	copy(out[48:], sum[:])
	return append(out, payload...)
}

// store writes the serialized module atomically: readers see the old file
// or the new one, never a torn one.
func (c *moduleCache) store(path string, key [32]byte, payload []byte) error {
	f, err := os.CreateTemp(c.dir, ".tmp-*.cwasm")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(encode(payload, key))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("wasmtime: module cache write %s: %w", path, err)
	}
	return nil
}

// compileCached compiles wasm, going through the cache when configured.
// A cache that cannot be read or written never fails the compile: the
// cache is an optimisation, the module bytes are the truth.
func (e *eng) compileCached(wasm []byte) (*wasmtime.Module, error) {
	if e.cache == nil {
		return wasmtime.NewModule(e.we, wasm)
	}
	path, key := e.cache.key(wasm)
	if payload, err := e.cache.load(path, key); err == nil {
		if m, err := wasmtime.NewModuleDeserialize(e.we, payload); err == nil {
			return m, nil
		}
		// Ours by the header but refused by wasmtime: recompile, replace.
	}
	m, err := wasmtime.NewModule(e.we, wasm)
	if err != nil {
		return nil, err
	}
	if payload, err := m.Serialize(); err == nil {
		_ = e.cache.store(path, key, payload)
	}
	return m, nil
}

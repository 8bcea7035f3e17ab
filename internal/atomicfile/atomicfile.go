// Package atomicfile is the one way the tree replaces a file so that a
// reader, or the next start after a crash, sees the old content or the
// new, never a mix (as runc writes its state.json): the OCI backend's
// state and exit records, the keeper's records, the state directory's
// keys, the manifest that `pin` rewrites. It imports only the standard
// library, so every layer may use it.
package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Options select what Write guarantees beyond atomicity.
type Options struct {
	// NoSync skips both fsyncs: the replacement is atomic but may be lost
	// by a machine crash. For records nobody needs after one (or that the
	// caller makes durable later with SyncFile, off its hot path).
	NoSync bool
	// NoClobber fails with fs.ErrExist instead of replacing an existing
	// path (the temporary file is hard-linked, not renamed): of two
	// creators of one file, the second learns it lost.
	NoClobber bool
	// Exec is for a file that is run later (a program, a script): this
	// process forks nothing while the file is open for writing. A child
	// forked then would hold the write descriptor until its own exec
	// closes it (O_CLOEXEC acts only at exec), and an exec of the file
	// meanwhile fails with ETXTBSY, "text file busy" (Go issue 22315).
	Exec bool
}

// Write replaces path with data: a temporary file in the same directory
// (O_EXCL, 0600 until chmod'ed to perm), written, fsync'd, renamed (or
// linked) over path, and the directory fsync'd so the rename itself is
// durable.
func Write(path string, data []byte, perm fs.FileMode, o Options) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := writeTemp(dir, base, data, perm, o)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if o.NoClobber {
		if err = os.Link(tmp, path); err != nil {
			return err
		}
		os.Remove(tmp)
	} else if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if o.NoSync {
		return nil
	}
	return SyncDir(dir)
}

// writeTemp writes data to a new temporary file beside base in dir and
// returns its name; the file is closed, and removed on an error.
func writeTemp(dir, base string, data []byte, perm fs.FileMode, o Options) (name string, err error) {
	if o.Exec {
		// Forks take ForkLock for writing (package syscall), so none
		// starts while it is held for reading.
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil && perm != 0o600 {
		err = f.Chmod(perm)
	}
	if err == nil && !o.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// SyncFile makes an already renamed file durable: fsync of the file, then
// of its directory (which holds the rename).
func SyncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if derr := SyncDir(filepath.Dir(path)); err == nil {
		err = derr
	}
	return err
}

// SyncDir fsyncs a directory, making a rename, link or create inside it
// durable (POSIX leaves the directory entry in the page cache otherwise).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

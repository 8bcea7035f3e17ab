// Package bundled extracts the capsules compiled into the binary to a
// directory, because the host loads capsules from directory paths. The
// files are rewritten only when their content changed, so a running
// daemon's copy is never truncated under it by a second process.
package bundled

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// Names lists the capsules in fsys: top-level directories holding a
// Capsule.toml.
func Names(fsys fs.FS) []string {
	if fsys == nil {
		return nil
	}
	ents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, err := fs.Stat(fsys, path.Join(e.Name(), "Capsule.toml")); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// Extract writes each capsule of fsys to dst/<name>/ and returns the
// directories, sorted by name.
func Extract(fsys fs.FS, dst string) ([]string, error) {
	var dirs []string
	for _, name := range Names(fsys) {
		dir := filepath.Join(dst, name)
		err := fs.WalkDir(fsys, name, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			out := filepath.Join(dst, filepath.FromSlash(p))
			if d.IsDir() {
				return os.MkdirAll(out, 0o700)
			}
			b, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			if old, err := os.ReadFile(out); err == nil && bytes.Equal(old, b) {
				return nil
			}
			tmp, err := os.CreateTemp(filepath.Dir(out), ".extract-*")
			if err != nil {
				return err
			}
			if _, err := tmp.Write(b); err != nil {
				tmp.Close()
				os.Remove(tmp.Name())
				return err
			}
			if err := tmp.Close(); err != nil {
				os.Remove(tmp.Name())
				return err
			}
			if err := os.Chmod(tmp.Name(), 0o600); err != nil {
				os.Remove(tmp.Name())
				return err
			}
			return os.Rename(tmp.Name(), out)
		})
		if err != nil {
			return nil, fmt.Errorf("extracting bundled capsule %q to %s: %w", name, dir, err)
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

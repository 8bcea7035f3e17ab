package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// CheckPrivateDir refuses a directory that another user could change: one
// owned by another uid, or writable by group or others (they could replace
// a key, the journal or the lock file between two of our system calls).
// A symbolic link to a directory is followed: the target is what counts.
// The keeper's socket directory obeys the same rule.
func CheckPrivateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &FileError{Path: dir, Kind: ErrNotDir, Detail: "the state directory must be a directory"}
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return &FileError{Path: dir, Kind: ErrNotOwned, Detail: fmt.Sprintf("owned by uid %d, the daemon runs as uid %d: chown it or use another directory", uid, os.Geteuid())}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &FileError{Path: dir, Kind: ErrInsecure, Detail: fmt.Sprintf("mode %04o lets group or others write in it: chmod 0700", fi.Mode().Perm())}
	}
	return nil
}

// CheckPrivateFile refuses a file that is not exactly what the daemon
// writes: a regular file (not a symlink), owned by the daemon's uid, mode
// 0600. The journal and the key files are checked this way before use.
func CheckPrivateFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return checkFileInfo(path, fi)
}

// checkFileInfo is CheckPrivateFile on a FileInfo, so a caller holding an
// open descriptor checks what it will read (fstat), not what a path named
// a moment earlier.
func checkFileInfo(path string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return &FileError{Path: path, Kind: ErrSymlink, Detail: "the daemon never creates links here: remove it"}
	case !fi.Mode().IsRegular():
		return &FileError{Path: path, Kind: ErrNotRegular, Detail: fmt.Sprintf("found %v: remove it", fi.Mode().Type())}
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return &FileError{Path: path, Kind: ErrNotOwned, Detail: fmt.Sprintf("owned by uid %d, the daemon runs as uid %d: chown it, or remove it if it is not the daemon's", uid, os.Geteuid())}
	}
	if fi.Mode().Perm() != 0o600 {
		return &FileError{Path: path, Kind: ErrInsecure, Detail: fmt.Sprintf("mode %04o, want 0600: chmod 0600 (a secret that others could read must be considered leaked)", fi.Mode().Perm())}
	}
	return nil
}

func ownerOf(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// errIsExist reports whether err means "already exists", for the no-clobber
// create race.
func errIsExist(err error) bool { return errors.Is(err, fs.ErrExist) }

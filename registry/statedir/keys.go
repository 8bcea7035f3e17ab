package statedir

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
)

// maxKeySize bounds LoadOrCreateKey's size argument: keys are tens of
// bytes, a larger request is a programming error.
const maxKeySize = 4096

// LoadOrCreateKey returns the secret key stored at path, creating it with
// size bytes from the OS CSPRNG if it does not exist. The directory is
// created 0700 if missing and must pass CheckPrivateDir; an existing key
// file must be a regular file of exactly size bytes, mode 0600, owned by
// the daemon's uid, or it is refused with a *FileError (a key someone else
// could have read or written is not a secret: the operator decides, the
// daemon does not silently mint a new one and orphan every process).
//
// Creation is atomic and never visible half-written or to others: the key
// is written to an O_EXCL 0600 temporary file, fsync'd, hard-linked into
// place (no clobbering a concurrent creator's key) and the directory
// fsync'd.
func LoadOrCreateKey(path string, size int) ([]byte, error) {
	if size <= 0 || size > maxKeySize {
		return nil, fmt.Errorf("statedir: key size %d is outside 1..%d", size, maxKeySize)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := CheckPrivateDir(dir); err != nil {
		return nil, err
	}
	for {
		key, err := readKey(path, size)
		if !errors.Is(err, fs.ErrNotExist) {
			return key, err
		}
		key = make([]byte, size)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("statedir: reading the CSPRNG: %w", err)
		}
		err = atomicfile.Write(path, key, 0o600, atomicfile.Options{NoClobber: true})
		if err == nil {
			return key, nil
		}
		if !errIsExist(err) {
			return nil, err
		}
		// Another creator won the race: load its key (loop once more).
	}
}

// readKey opens path without following a symlink and checks the open file
// (fstat), so what is checked is what is read.
func readKey(path string, size int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, &FileError{Path: path, Kind: ErrSymlink, Detail: "a key file must not be a link: remove it"}
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkFileInfo(path, fi); err != nil {
		return nil, err
	}
	if fi.Size() != int64(size) {
		return nil, &FileError{Path: path, Kind: ErrSize, Detail: fmt.Sprintf("%d bytes, want %d: the file is damaged or not a key of this daemon; restore it from a backup, or remove it (IDs and cursors issued with the old key become invalid)", fi.Size(), size)}
	}
	key := make([]byte, size)
	if _, err := io.ReadFull(f, key); err != nil {
		return nil, fmt.Errorf("%s: reading key: %w", path, err)
	}
	return key, nil
}

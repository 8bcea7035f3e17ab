package keeper

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/capsule-host/capsule-host/internal/pidlock"
)

// Names inside a keeper directory.
const (
	SocketName = "keeper.sock"
	LockName   = "keeper.lock"
	LogName    = "keeper.log"
	procsName  = "procs"
)

// maxSocketPath is sun_path's capacity minus the terminating NUL.
const maxSocketPath = 107

// checkOwned refuses a path that another user could replace or use to
// plant a socket: not owned by us, writable by group or others, or (with
// Lstat) a symlink. want is the file type expected.
func checkOwned(path string, want fs.FileMode) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if st.Mode().Type() != want {
		return &UnsafePathError{Path: path, Reason: fmt.Sprintf("type %v, want %v", st.Mode().Type(), want)}
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return &UnsafePathError{Path: path, Reason: "no owner information"}
	}
	if int(sys.Uid) != os.Geteuid() {
		return &UnsafePathError{Path: path, Reason: fmt.Sprintf("owned by uid %d, not %d", sys.Uid, os.Geteuid())}
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return &UnsafePathError{Path: path, Reason: fmt.Sprintf("mode %04o is writable by group or others", perm)}
	}
	return nil
}

// prepareDir creates dir (0700) and its procs directory if missing and
// checks both. An existing unsafe directory is refused, never chmod-ed:
// its contents may already be someone else's.
func prepareDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("keeper dir %q is not absolute: %w", dir, ErrUnsafePath)
	}
	if len(filepath.Join(dir, SocketName)) > maxSocketPath {
		return fmt.Errorf("keeper dir %q: socket path longer than %d bytes: %w", dir, maxSocketPath, ErrUnsafePath)
	}
	for _, d := range []string{dir, filepath.Join(dir, procsName)} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("keeper dir: %w", err)
		}
		if err := checkOwned(d, fs.ModeDir); err != nil {
			return err
		}
	}
	return nil
}

// lockDir takes the directory's exclusive lock (a pidlock: the kernel
// drops it when the keeper dies, however it dies, and no child inherits
// it), refusing a lock file that is not ours.
func lockDir(dir string) (*pidlock.Lock, error) {
	path := filepath.Join(dir, LockName)
	l, err := pidlock.Acquire(path, func(*os.File) error { return checkOwned(path, 0) })
	var held *pidlock.HeldError
	switch {
	case errors.As(err, &held):
		return nil, &LockedError{Dir: dir, PID: held.PID}
	case err != nil:
		return nil, fmt.Errorf("keeper lock: %w", err)
	}
	return l, nil
}

// listen binds the socket. We hold the lock, so an existing socket file
// is a dead keeper's and is replaced. The 0700 directory already keeps
// others out; 0600 on the socket says so again for whoever inspects it.
func listen(dir string) (*net.UnixListener, error) {
	path := filepath.Join(dir, SocketName)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("keeper socket: remove stale: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("keeper socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // removed explicitly, while the lock is still held
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("keeper socket: %w", err)
	}
	return ln, nil
}

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Confinement says how ResolveInRoot treats a path that tries to leave
// its root. The two are openat2's two confined lookups.
type Confinement uint8

const (
	// Beneath refuses to leave: an absolute path, an absolute symlink or
	// a ".." above the root is ErrBoundaryEscape (RESOLVE_BENEATH). A
	// guest's cwd in its workspace is resolved so.
	Beneath Confinement = iota
	// InRoot treats the root as "/": an absolute path or symlink starts
	// at the root and ".." stops there (RESOLVE_IN_ROOT). A command in an
	// image is resolved so, as the container will see it.
	InRoot
)

// Resolved is a path resolved inside a root.
type Resolved struct {
	Host string      // absolute, symlink-free host path, below the root's real path
	Path string      // the same file inside the root, "/"-rooted ("/" is the root)
	Mode fs.FileMode // the file's type and permission bits
}

// maxSymlinks bounds a walk, as the kernel's MAXSYMLINKS does.
const maxSymlinks = 40

// ResolveInRoot resolves p inside root (an absolute directory) and never
// returns a file outside it. p is relative to root; Confinement decides
// what a leading "/", an absolute symlink and a ".." above root mean.
//
// The lookup is openat2 (RESOLVE_NO_MAGICLINKS plus the Confinement's
// flag), which the kernel enforces component by component; where openat2
// is missing, filtered, or keeps answering EAGAIN, it walks the path one
// component at a time with the same semantics. Errors wrap the OS errno
// (fs.ErrNotExist, syscall.ENOTDIR, syscall.ELOOP, ...) or
// ErrBoundaryEscape; under Beneath a symlink loop (ELOOP, which is also
// what a magic link gives) wraps both.
func ResolveInRoot(root, p string, c Confinement) (Resolved, error) {
	return resolveInRoot(root, p, c, false)
}

// resolveInRoot is ResolveInRoot; walk skips openat2 (tests run both).
func resolveInRoot(root, p string, c Confinement, walk bool) (Resolved, error) {
	if !filepath.IsAbs(root) {
		return Resolved{}, fmt.Errorf("root %q is not absolute: %w", root, ErrInvalidSpec)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return Resolved{}, fmt.Errorf("path %q contains NUL: %w", p, ErrInvalidSpec)
	}
	if c == Beneath && filepath.IsAbs(p) {
		return Resolved{}, escapeErr(p)
	}
	if p == "" {
		p = "."
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Resolved{}, &fs.PathError{Op: "open root", Path: root, Err: err}
	}
	defer unix.Close(rootFD)
	realRoot, err := fdPath(rootFD)
	if err != nil {
		return Resolved{}, &fs.PathError{Op: "open root", Path: root, Err: err}
	}
	if !walk {
		r, err := openInRoot(rootFD, realRoot, p, c)
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EAGAIN) {
			return r, err
		}
	}
	return walkInRoot(realRoot, p, c)
}

// openInRoot is the openat2 lookup. ENOSYS (an old kernel), EPERM (a
// seccomp filter) and a persistent EAGAIN stay reachable with errors.Is,
// for the caller to fall back on.
func openInRoot(rootFD int, realRoot, p string, c Confinement) (Resolved, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	if c == InRoot {
		how.Resolve |= unix.RESOLVE_IN_ROOT
	} else {
		how.Resolve |= unix.RESOLVE_BENEATH
	}
	fd, err := openat2(rootFD, p, how)
	if err != nil {
		return Resolved{}, lookupErr(p, c, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Resolved{}, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	hp, err := fdPath(fd)
	if err != nil {
		return Resolved{}, &fs.PathError{Op: "resolve", Path: p, Err: err}
	}
	in, ok := inRootPath(realRoot, hp)
	if !ok { // the kernel promised otherwise; never hand it out
		return Resolved{}, fmt.Errorf("%q resolved to %q, outside the root %q: %w", p, hp, realRoot, ErrBoundaryEscape)
	}
	return Resolved{Host: hp, Path: in, Mode: modeOf(st.Mode)}, nil
}

// openat2 is unix.Openat2 retried on EAGAIN. With RESOLVE_BENEATH or
// RESOLVE_IN_ROOT the kernel answers EAGAIN when a rename or mount anywhere
// on the system raced the lookup of a ".." and it cannot prove the path
// stayed inside; openat2(2) asks the caller to retry. A busy host hits
// this, so a bounded retry precedes giving up (and walking instead).
func openat2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, path, how)
		if err != unix.EAGAIN || i == 63 {
			return fd, err
		}
	}
}

// walkInRoot is the lookup without openat2: one component at a time with
// lstat, symlink targets resolved against the confined path (never the
// host's), ".." taken from the symlink-free path so far. A racing writer
// inside root could swap a component between two steps; the kernel's
// lookup has no such window, which is why it comes first.
func walkInRoot(realRoot, p string, c Confinement) (Resolved, error) {
	todo := strings.Split(p, "/")
	cur := "/" // symlink-free, inside the root
	links := 0
	for len(todo) > 0 {
		comp := todo[0]
		todo = todo[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			if cur == "/" && c == Beneath {
				return Resolved{}, escapeErr(p)
			}
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, comp)
		fi, err := os.Lstat(filepath.Join(realRoot, next))
		if err != nil {
			return Resolved{}, lookupErr(p, c, unwrapPathErr(err))
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if len(todo) > 0 && !fi.IsDir() {
				return Resolved{}, lookupErr(p, c, unix.ENOTDIR)
			}
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return Resolved{}, lookupErr(p, c, unix.ELOOP)
		}
		target, err := os.Readlink(filepath.Join(realRoot, next))
		if err != nil {
			return Resolved{}, lookupErr(p, c, unwrapPathErr(err))
		}
		switch {
		case target == "": // the kernel's answer to an empty symlink
			return Resolved{}, lookupErr(p, c, unix.ENOENT)
		case filepath.IsAbs(target) && c == Beneath:
			return Resolved{}, fmt.Errorf("%q: absolute symlink %q leaves the root: %w", p, target, ErrBoundaryEscape)
		case filepath.IsAbs(target):
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	host := filepath.Join(realRoot, cur)
	var st unix.Stat_t
	if err := unix.Lstat(host, &st); err != nil { // cur is symlink-free
		return Resolved{}, lookupErr(p, c, err)
	}
	return Resolved{Host: host, Path: cur, Mode: modeOf(st.Mode)}, nil
}

// lookupErr wraps a lookup's errno. Under Beneath the kernel says EXDEV
// for every way out, and ELOOP for a loop or a magic link: both refuse
// the path as an escape (ELOOP stays reachable with errors.Is).
func lookupErr(p string, c Confinement, errno error) error {
	if c == Beneath && errors.Is(errno, unix.EXDEV) {
		return escapeErr(p)
	}
	if c == Beneath && errors.Is(errno, unix.ELOOP) {
		return fmt.Errorf("%w (%w)", escapeErr(p), errno)
	}
	return &fs.PathError{Op: "resolve", Path: p, Err: errno}
}

func escapeErr(p string) error {
	return fmt.Errorf("%q leaves the root: %w", p, ErrBoundaryEscape)
}

func fdPath(fd int) (string, error) {
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}

// inRootPath turns a host path below root into its in-root path.
func inRootPath(root, hp string) (string, bool) {
	if hp == root {
		return "/", true
	}
	if root == "/" {
		return hp, true
	}
	rest, ok := strings.CutPrefix(hp, root+"/")
	if !ok {
		return "", false
	}
	return "/" + rest, true
}

func modeOf(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFREG:
	default:
		mode |= fs.ModeIrregular
	}
	return mode
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

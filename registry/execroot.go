package registry

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox"
)

// Exec enforcement inside a root (CapsulePolicy.ExecRoot, set by the host
// for the oci backend from the launch profile's rootfs).
//
// A container runs the program its argv[0] names inside its own root, so
// the host's filesystem says nothing about what will run: /bin/sh on the
// host and /bin/sh in the image are different files. The command is
// therefore looked up and resolved inside the root, as if the root were
// "/" (absolute symlinks restart at the root, ".." stops there), and the
// in-root path, never a host path, becomes argv[0].
//
// Matching is on (resolved file, name invoked): a multi-call binary such
// as busybox is one file behind every applet symlink, and it picks the
// applet from argv[0], so matching the file alone would let an allowed
// /bin/true run /bin/rm. Requiring the same base name as well keeps
// aliases of one program (/bin/sh and /usr/bin/sh on a merged-/usr image)
// working and nothing else. argv[0] is the path as invoked (cleaned),
// not the resolved one, for the same reason: busybox must see "sh".

// resolveInRoot resolves the absolute path p inside root as if root were
// "/", and returns the resolved in-root path with the file's mode. It
// uses openat2(RESOLVE_IN_ROOT), which the kernel enforces component by
// component; where openat2 is missing (or filtered), it walks the path
// itself with the same semantics.
func resolveInRoot(root, p string) (string, fs.FileMode, error) {
	if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
		return "", 0, fmt.Errorf("%q is not an absolute path", p)
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFD)
	realRoot, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(rootFD))
	if err != nil {
		return "", 0, err
	}
	rel := strings.TrimLeft(filepath.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := sandbox.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EAGAIN) {
		return walkInRoot(realRoot, p)
	}
	if err != nil {
		return "", 0, &fs.PathError{Op: "resolve", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", 0, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	hp, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", 0, err
	}
	in, ok := inRoot(realRoot, hp)
	if !ok {
		return "", 0, fmt.Errorf("%q resolved to %q, outside the root %q", p, hp, realRoot)
	}
	return in, modeOf(st.Mode), nil
}

// inRoot turns a host path below root into its in-root path.
func inRoot(root, hp string) (string, bool) {
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

// maxSymlinks bounds a walk, as the kernel's MAXSYMLINKS does.
const maxSymlinks = 40

// walkInRoot is resolveInRoot without openat2: one component at a time
// with lstat, symlink targets re-rooted at root, ".." clamped at root.
// (The roots it serves are operator-owned images, read-only to every
// sandboxed process, so no racing writer can swap a component.)
func walkInRoot(root, p string) (string, fs.FileMode, error) {
	todo := strings.Split(strings.TrimLeft(filepath.Clean(p), "/"), "/")
	cur := "/"
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", 0, &fs.PathError{Op: "resolve", Path: p, Err: unwrapPathErr(err)}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if len(todo) > 0 && !fi.IsDir() {
				return "", 0, &fs.PathError{Op: "resolve", Path: p, Err: unix.ENOTDIR}
			}
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", 0, &fs.PathError{Op: "resolve", Path: p, Err: unix.ELOOP}
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", 0, &fs.PathError{Op: "resolve", Path: p, Err: unwrapPathErr(err)}
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	fi, err := os.Stat(filepath.Join(root, cur)) // cur is symlink-free
	if err != nil {
		return "", 0, &fs.PathError{Op: "stat", Path: p, Err: unwrapPathErr(err)}
	}
	return cur, fi.Mode(), nil
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// under reports whether the in-root path p is one of dirs or below one.
func under(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || d == "/" || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// rootExecKey is the exec-list key of a command inside a root: the
// resolved file and the name it is invoked by.
func rootExecKey(resolved, invoked string) string {
	return resolved + "\x00" + filepath.Base(invoked)
}

// RootExecutable resolves the in-root path p inside root and returns the
// resolved in-root path if it names a regular executable file that the
// sandbox does not mount over (hidden: the workspace, /tmp, /dev, …:
// there the image's content is not what the process would see). The host
// calls it at load to refuse an exec entry the image lacks; the registry
// applies the same rule to every command.
func RootExecutable(root string, hidden []string, p string) (string, error) {
	return rootExecutable(root, hidden, p)
}

func rootExecutable(root string, hidden []string, p string) (string, error) {
	if under(p, hidden) {
		return "", fmt.Errorf("%q is mounted over inside the sandbox: %w", p, fs.ErrPermission)
	}
	res, mode, err := resolveInRoot(root, p)
	if err != nil {
		return "", err
	}
	if under(res, hidden) {
		return "", fmt.Errorf("%q resolves to %q, which is mounted over inside the sandbox: %w", p, res, fs.ErrPermission)
	}
	if !mode.IsRegular() || mode.Perm()&0o111 == 0 {
		return "", fmt.Errorf("%q is not an executable file: %w", p, fs.ErrPermission)
	}
	return res, nil
}

// resolveExecInRoot is resolveExec for a capsule whose processes run
// inside root (see the top of this file). It returns the in-root path to
// use as argv[0]. As on the host, a command that is neither allowed nor
// found is capability-denied, so a guest cannot probe the image; only an
// allowed-but-missing entry says "not found".
func resolveExecInRoot(cmd, path, root string, hidden []string, allowed, literal map[string]bool) (string, error) {
	resolve := func(c string) (string, error) { return rootExecutable(root, hidden, c) }
	found := func(c string) bool { _, err := resolve(c); return err == nil }
	return matchExec(cmd, path, allowed, literal, "in the sandbox's root filesystem", found, resolve)
}

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ConfineCwd resolves rel inside root and returns the resulting absolute,
// symlink-free directory. root must be an absolute existing directory; rel
// is relative ("" and "." mean root). An absolute rel, or one that leaves
// root through ".." or a symlink (absolute or relative), is refused with an
// error wrapping ErrBoundaryEscape. A missing directory wraps
// fs.ErrNotExist, a non-directory syscall.ENOTDIR.
//
// The check uses openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS), which the
// kernel enforces component by component, then reads the opened
// directory's real path; on kernels without openat2 it walks the path
// one component at a time with O_NOFOLLOW and resolves symlinks itself.
func ConfineCwd(root, rel string) (string, error) {
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("workspace root %q is not absolute: %w", root, ErrInvalidSpec)
	}
	if filepath.IsAbs(rel) {
		return "", fmt.Errorf("cwd %q is absolute: %w", rel, ErrBoundaryEscape)
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return "", fmt.Errorf("cwd contains NUL: %w", ErrBoundaryEscape)
	}
	if rel == "" {
		rel = "."
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("workspace root %q: %w", root, err)
	}
	defer unix.Close(rootFD)
	fd, err := Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EAGAIN) {
		return confineWalk(root, rel)
	}
	if err != nil {
		return "", cwdErr(rel, err)
	}
	defer unix.Close(fd)
	return fdPath(fd, rel)
}

// Openat2 is unix.Openat2 retried on EAGAIN. With RESOLVE_BENEATH or
// RESOLVE_IN_ROOT the kernel answers EAGAIN when a rename or mount anywhere
// on the system raced the lookup of a ".." and it cannot prove the path
// stayed inside; openat2(2) asks the caller to retry. A busy host hits
// this, so a bounded retry precedes giving up; callers then fall back to
// their component-by-component walk.
func Openat2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, path, how)
		if err != unix.EAGAIN || i == 63 {
			return fd, err
		}
	}
}

func cwdErr(rel string, err error) error {
	if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("cwd %q leaves the workspace: %w", rel, ErrBoundaryEscape)
	}
	return fmt.Errorf("cwd %q: %w", rel, err)
}

func fdPath(fd int, rel string) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("cwd %q: resolve: %w", rel, err)
	}
	return p, nil
}

// confineWalk is the pre-openat2 fallback: resolve each component under
// root by hand, following symlinks against the confined path, never the
// host's.
func confineWalk(root, rel string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("workspace root %q: %w", root, err)
	}
	var stack []string // components below realRoot
	todo := strings.Split(filepath.ToSlash(rel), "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "", fmt.Errorf("cwd %q leaves the workspace: %w", rel, ErrBoundaryEscape)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		p := filepath.Join(append([]string{realRoot}, append(stack, c)...)...)
		st, err := os.Lstat(p)
		if err != nil {
			return "", fmt.Errorf("cwd %q: %w", rel, err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			if links++; links > 40 {
				return "", fmt.Errorf("cwd %q: %w", rel, unix.ELOOP)
			}
			t, err := os.Readlink(p)
			if err != nil {
				return "", fmt.Errorf("cwd %q: %w", rel, err)
			}
			if filepath.IsAbs(t) {
				return "", fmt.Errorf("cwd %q: absolute symlink %q leaves the workspace: %w", rel, t, ErrBoundaryEscape)
			}
			todo = append(strings.Split(filepath.ToSlash(t), "/"), todo...)
			continue
		}
		if !st.IsDir() && len(todo) == 0 {
			return "", fmt.Errorf("cwd %q: %w", rel, unix.ENOTDIR)
		}
		stack = append(stack, c)
	}
	return filepath.Join(append([]string{realRoot}, stack...)...), nil
}

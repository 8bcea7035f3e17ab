package sandbox

import (
	"fmt"
	"path/filepath"
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
// It is ResolveInRoot with Beneath (openat2 RESOLVE_BENEATH, or the
// component walk where openat2 is missing), then a directory check.
func ConfineCwd(root, rel string) (string, error) {
	return confineCwd(root, rel, false)
}

// confineCwd is ConfineCwd; walk skips openat2 (tests run both).
func confineCwd(root, rel string, walk bool) (string, error) {
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("workspace root %q is not absolute: %w", root, ErrInvalidSpec)
	}
	if filepath.IsAbs(rel) {
		return "", fmt.Errorf("cwd %q is absolute: %w", rel, ErrBoundaryEscape)
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return "", fmt.Errorf("cwd contains NUL: %w", ErrBoundaryEscape)
	}
	r, err := resolveInRoot(root, rel, Beneath, walk)
	if err != nil {
		return "", fmt.Errorf("cwd: %w", err)
	}
	if !r.Mode.IsDir() {
		return "", fmt.Errorf("cwd %q: %w", rel, unix.ENOTDIR)
	}
	return r.Host, nil
}

package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// imageRoot lays out a small image (as registry/execroot_test.go does for
// the exec-in-root lookup): a busybox-like multi-call binary behind applet
// symlinks, an absolute alias under /usr/bin, symlinks that try to leave
// the root, one into the workspace mount point, a loop. Next to the root
// is a directory the root must never reach.
func imageRoot(t testing.TB) (root, outside string) {
	t.Helper()
	parent := t.TempDir()
	root, outside = filepath.Join(parent, "root"), filepath.Join(parent, "outside")
	for _, d := range []string{"bin", "usr/bin", "workspace", "etc", "tmp", "../outside"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]os.FileMode{"bin/busybox": 0o755, "bin/notexec": 0o644, "workspace/tool": 0o755,
		"tmp/dropped": 0o755, "etc/hostname": 0o644, "../outside/secret": 0o644}
	for f, m := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), m); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"bin/sh":      "busybox",
		"bin/true":    "busybox",
		"bin/rm":      "busybox",
		"usr/bin/sh":  "/bin/busybox",             // absolute: re-rooted
		"bin/escape":  "../../../../../../bin/sh", // ".." stops at the root
		"bin/passwd":  "/etc/passwd",              // the host has one; the image does not
		"bin/ws":      "/workspace/tool",          // into a mount point
		"bin/tmp":     "../tmp/dropped",           // into /tmp
		"bin/loop":    "loop",                     // ELOOP
		"bin/dir":     "/usr",                     // a directory
		"usr/bin/cat": "/../../../../bin/notexec", // not executable
		"etc/out":     "../../outside/secret",     // the sibling, relatively
		"etc/outabs":  outside,                    // the sibling, by its host path
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

// variants are the two lookups behind ResolveInRoot: openat2, and the
// component walk it falls back to.
var variants = map[string]bool{"openat2": false, "walk": true}

func TestResolveInRoot(t *testing.T) {
	root, _ := imageRoot(t)
	tests := []struct {
		path, want string
		err        error
	}{
		{"/bin/sh", "/bin/busybox", nil},
		{"/usr/bin/sh", "/bin/busybox", nil},
		{"/bin/escape", "/bin/busybox", nil},
		{"/bin/../../bin/sh", "/bin/busybox", nil},
		{"/bin/ws", "/workspace/tool", nil},
		{"/bin/dir", "/usr", nil},
		{"/bin/passwd", "", os.ErrNotExist},
		{"/bin/nothing", "", os.ErrNotExist},
		{"/bin/loop", "", syscall.ELOOP},
		{"/bin/sh/x", "", syscall.ENOTDIR},
		// Added with the shared resolver:
		{"bin/sh", "/bin/busybox", nil}, // relative means the same under InRoot
		{"/", "/", nil},
		{"", "/", nil},
		{"/etc/out", "", os.ErrNotExist},           // becomes /outside/secret in the root
		{"/etc/outabs/secret", "", os.ErrNotExist}, // re-rooted host path
		{"/bin/notexec/", "", syscall.ENOTDIR},
		{"/bin/sh/..", "", syscall.ENOTDIR},
	}
	for _, tc := range tests {
		for name, walk := range variants {
			r, err := resolveInRoot(root, tc.path, InRoot, walk)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Errorf("%s(%s) = %q, %v; want %v", name, tc.path, r.Path, err, tc.err)
				}
				continue
			}
			if err != nil || r.Path != tc.want {
				t.Errorf("%s(%s) = %q, %v; want %q", name, tc.path, r.Path, err, tc.want)
			}
		}
	}
}

// Beneath on the same image: every way out is ErrBoundaryEscape.
func TestResolveBeneath(t *testing.T) {
	root, _ := imageRoot(t)
	tests := []struct {
		path, want string
		err        error
	}{
		{"bin/sh", "/bin/busybox", nil},
		{"bin/tmp", "/tmp/dropped", nil},
		{".", "/", nil},
		{"bin/../etc", "/etc", nil},
		{"/bin/sh", "", ErrBoundaryEscape},    // absolute path
		{"usr/bin/sh", "", ErrBoundaryEscape}, // absolute symlink
		{"bin/escape", "", ErrBoundaryEscape}, // ".." above the root
		{"etc/out", "", ErrBoundaryEscape},    // ".." to the sibling
		{"etc/outabs", "", ErrBoundaryEscape}, // host path of the sibling
		{"bin/../..", "", ErrBoundaryEscape},  // ".." from the root itself
		{"bin/loop", "", ErrBoundaryEscape},   // a loop (or a magic link) ...
		{"bin/loop", "", syscall.ELOOP},       // ... stays an ELOOP
		{"bin/nothing", "", os.ErrNotExist},
		{"etc/hostname/x", "", syscall.ENOTDIR},
	}
	for _, tc := range tests {
		for name, walk := range variants {
			r, err := resolveInRoot(root, tc.path, Beneath, walk)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Errorf("%s(%s) = %q, %v; want %v", name, tc.path, r.Path, err, tc.err)
				}
				continue
			}
			if err != nil || r.Path != tc.want {
				t.Errorf("%s(%s) = %q, %v; want %q", name, tc.path, r.Path, err, tc.want)
			}
		}
	}
}

// FuzzResolveInRoot: whatever the path, no result is ever outside the
// root, every result is a symlink-free host path whose in-root path is
// its own, and the walk agrees with the kernel.
func FuzzResolveInRoot(f *testing.F) {
	root, outside := imageRoot(f)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"/bin/sh", "bin/escape", "../outside/secret", "etc/out", "etc/outabs/secret",
		"/bin/../../bin/sh", "usr/bin/cat", "bin/loop", "bin/dir/bin/sh", "bin/sh/..", "a\x00b", ""} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p string, inRoot bool) {
		c := Beneath
		if inRoot {
			c = InRoot
		}
		var got [2]Resolved
		var errs [2]error
		for i, walk := range []bool{false, true} {
			r, err := resolveInRoot(root, p, c, walk)
			got[i], errs[i] = r, err
			if err != nil {
				continue
			}
			if r.Host != realRoot && !strings.HasPrefix(r.Host, realRoot+"/") || strings.HasPrefix(r.Host, outside) {
				t.Fatalf("walk=%v %q: %q is outside the root %q", walk, p, r.Host, realRoot)
			}
			if r.Path != filepath.Clean(r.Path) || !filepath.IsAbs(r.Path) || filepath.Join(realRoot, r.Path) != r.Host {
				t.Fatalf("walk=%v %q: host %q and in-root %q disagree", walk, p, r.Host, r.Path)
			}
			if ev, err := filepath.EvalSymlinks(r.Host); err != nil || ev != r.Host {
				t.Fatalf("walk=%v %q: %q is not symlink-free (%q, %v)", walk, p, r.Host, ev, err)
			}
		}
		if errors.Is(errs[0], syscall.ENAMETOOLONG) {
			return // the kernel bounds the whole path (PATH_MAX); the walk, each step
		}
		if (errs[0] == nil) != (errs[1] == nil) || got[0] != got[1] ||
			errors.Is(errs[0], ErrBoundaryEscape) != errors.Is(errs[1], ErrBoundaryEscape) {
			t.Fatalf("%q (in-root %v): openat2 %+v, %v; walk %+v, %v", p, inRoot, got[0], errs[0], got[1], errs[1])
		}
	})
}

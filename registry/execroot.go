package registry

import (
	"fmt"
	"io/fs"
	"path/filepath"

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
// in-root path, never a host path, becomes argv[0]. The lookup is
// sandbox.ResolveInRoot with InRoot, the one in-root resolver.
//
// Matching is on (resolved file, name invoked): a multi-call binary such
// as busybox is one file behind every applet symlink, and it picks the
// applet from argv[0], so matching the file alone would let an allowed
// /bin/true run /bin/rm. Requiring the same base name as well keeps
// aliases of one program (/bin/sh and /usr/bin/sh on a merged-/usr image)
// working and nothing else. argv[0] is the path as invoked (cleaned),
// not the resolved one, for the same reason: busybox must see "sh".

// under reports whether the in-root path p is one of dirs or below one.
func under(p string, dirs []string) bool {
	for _, d := range dirs {
		if sandbox.Within(d, p) {
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
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path: %w", p, fs.ErrInvalid)
	}
	if under(p, hidden) {
		return "", fmt.Errorf("%q is mounted over inside the sandbox: %w", p, fs.ErrPermission)
	}
	r, err := sandbox.ResolveInRoot(root, p, sandbox.InRoot)
	if err != nil {
		return "", err
	}
	res, mode := r.Path, r.Mode
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
func resolveExecInRoot(cmd, path, root string, hidden []string, allowed, literal map[string]bool) (argv0, file string, err error) {
	resolve := func(c string) (string, error) { return rootExecutable(root, hidden, c) }
	found := func(c string) bool { _, err := resolve(c); return err == nil }
	return matchExec(cmd, path, allowed, literal, "in the sandbox's root filesystem", found, resolve)
}

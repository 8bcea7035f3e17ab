// Package rootfs builds the minimal OCI root filesystem the sandbox tests
// (and operators who want a starting point) use: Debian's busybox-static
// with one symlink per applet, plus the mount points and /etc files a
// runtime expects. Nothing is downloaded: the only input is the host's
// statically linked busybox binary.
package rootfs

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
)

// DefaultBusybox is where Debian's busybox-static package installs it.
const DefaultBusybox = "/bin/busybox"

// ErrNotStatic: a dynamically linked busybox would need the host's loader
// inside the rootfs, which defeats the point of a minimal root.
var ErrNotStatic = errors.New("busybox is not statically linked (install busybox-static)")

// Busybox builds a rootfs in dir (which must not exist or be empty) from
// the busybox binary at src.
func Busybox(src, dir string) error {
	if err := checkStatic(src); err != nil {
		return err
	}
	out, err := exec.Command(src, "--list").Output()
	if err != nil {
		return fmt.Errorf("rootfs: %s --list: %w", src, err)
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "tmp", "root", "home", "opt", "mnt", "workspace", "run", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := copyFile(src, filepath.Join(dir, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.ContainsAny(applet, "/\x00") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("rootfs: applet %s: %w", applet, err)
		}
	}
	files := map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":    "root:x:0:\nnogroup:x:65534:\n",
		"etc/hosts":    "127.0.0.1 localhost\n::1 localhost\n",
		"etc/hostname": "capsule\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	return nil
}

// layoutVersion changes whenever Busybox lays out a different tree, so a
// stale cached root is never reused.
const layoutVersion = 2

// Cached builds (once) a busybox rootfs under cacheDir, keyed by the
// binary's hash, and returns its path. The build goes to a temporary
// directory renamed into place, so concurrent test processes never see a
// half-built root.
func Cached(src, cacheDir string) (string, error) {
	sum, err := fileHash(src)
	if err != nil {
		return "", err
	}
	final := filepath.Join(cacheDir, fmt.Sprintf("busybox-rootfs-v%d-%s", layoutVersion, sum[:16]))
	if _, err := os.Stat(filepath.Join(final, "bin", "busybox")); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	if err := Busybox(src, tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		// Lost a race with another builder: use theirs.
		if _, serr := os.Stat(filepath.Join(final, "bin", "busybox")); serr == nil {
			return final, nil
		}
		return "", fmt.Errorf("rootfs: %w", err)
	}
	return final, nil
}

func checkStatic(src string) error {
	f, err := elf.Open(src)
	if err != nil {
		return fmt.Errorf("rootfs: %s: %w", src, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("rootfs: %s: %w", src, ErrNotStatic)
		}
	}
	return nil
}

func fileHash(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	// Exec: runc runs it next, while the daemon may be forking.
	if err := atomicfile.Write(dst, b, mode, atomicfile.Options{NoSync: true, Exec: true}); err != nil {
		return fmt.Errorf("rootfs: copy %s: %w", src, err)
	}
	return nil
}

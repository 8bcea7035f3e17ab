package bwrap

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
)

// As root without Options.User, sandbox root is host root inside bwrap's
// user namespace (it remounted / read-write and wrote /root). With User,
// the program runs as that unprivileged uid, with no capabilities: host
// root's files are closed to it, / stays read-only, and the workspace,
// given to it, stays writable.
func TestSandboxUserDropsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: Options.User is for a root daemon")
	}
	e := newEnv(t)
	b, err := New(Options{StateDir: e.state, Home: e.home, User: &sandbox.Owner{UID: 65534, GID: 65534}})
	if err != nil {
		t.Fatal(err)
	}
	e.b = b
	probe := filepath.Join(filepath.Dir(e.state), "root-owned")
	if err := os.WriteFile(probe, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `id -u; id -G; grep CapEff /proc/self/status;
mount -o remount,bind,rw / 2>/dev/null && echo REMOUNTED;
cat ` + probe + ` 2>/dev/null && echo READ-ROOT-FILE;
ls /root >/dev/null 2>&1 && echo LISTED-ROOT;
echo ok > in-workspace && cat in-workspace`
	out, errOut, ex := run(t, e, e.spec(script))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if ex.Code != 0 || len(lines) != 4 || lines[0] != "65534" || lines[1] != "65534" || !strings.HasSuffix(lines[2], "0000000000000000") || lines[3] != "ok" {
		t.Fatalf("exit %+v stdout %q stderr %q: want uid and gid 65534, no capabilities, no escape, a writable workspace", ex, out, errOut)
	}
	args, err := b.Args(e.spec("true"))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(args, "--unshare-all") || !slices.Contains(args, "--unshare-pid") || !slices.Contains(args, "--unshare-net") {
		t.Errorf("args %q: want every namespace but the user one", args)
	}
}

// Root is never a sandbox user.
func TestSandboxUserNotRoot(t *testing.T) {
	for _, u := range []sandbox.Owner{{UID: 0, GID: 1}, {UID: 1, GID: 0}, {UID: -1, GID: 5}} {
		if _, err := New(Options{Path: "/bin/true", User: &u}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("user %+v: %v", u, err)
		}
	}
}

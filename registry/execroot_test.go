package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
)

// imageRoot lays out a small image (sandbox/inroot_test.go has the same
// one for the resolver itself): a busybox-like multi-call binary
// behind applet symlinks, an absolute alias under /usr/bin, symlinks that
// try to leave the root, one into the workspace mount point, a loop.
func imageRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "usr/bin", "workspace", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]os.FileMode{"bin/busybox": 0o755, "bin/notexec": 0o644, "workspace/tool": 0o755, "tmp/dropped": 0o755, "etc/hostname": 0o644}
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
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

var imageHidden = []string{"/workspace", "/tmp", "/dev", "/proc", "/sys"}

func TestResolveExecInRoot(t *testing.T) {
	root := imageRoot(t)
	r := bareRegistry(t)
	err := r.RegisterCapsule("img", CapsulePolicy{
		Exec:       []string{"/bin/sh", "/bin/true", "/workspace/tool", "/bin/tmp", "/bin/missing", "/usr/bin/cat"},
		Workspace:  t.TempDir(),
		ExecRoot:   root,
		ExecHidden: imageHidden,
	})
	if err != nil {
		t.Fatal(err)
	}
	cs := r.capsules["img"]
	const path = "/usr/local/bin:/usr/bin:/bin"
	tests := []struct {
		cmd, want string
		err       error
	}{
		{"/bin/sh", "/bin/sh", nil},
		{"/bin/../bin/./sh", "/bin/sh", nil},
		{"sh", "/usr/bin/sh", nil},                   // PATH order, inside the image
		{"/usr/bin/sh", "/usr/bin/sh", nil},          // same file, same name: an alias
		{"true", "/bin/true", nil},                   // argv[0] keeps the applet's name
		{"/bin/rm", "", ErrCapabilityDenied},         // same file as /bin/sh, another name
		{"/bin/escape", "", ErrCapabilityDenied},     // resolves to busybox, but named "escape"
		{"/workspace/tool", "", ErrCapabilityDenied}, // mounted over in the sandbox
		{"/bin/ws", "", ErrCapabilityDenied},
		{"/bin/tmp", "", ErrCapabilityDenied},
		{"/usr/bin/cat", "", ErrCapabilityDenied}, // not executable
		{"/bin/missing", "", ErrInvalidInput},     // allowed but not in the image
		{"/bin/passwd", "", ErrCapabilityDenied},  // the host's file is not the image's
		{"cat", "", ErrCapabilityDenied},
		{"bin/sh", "", ErrCapabilityDenied},
		{"/bin/loop", "", ErrCapabilityDenied},
	}
	for _, tc := range tests {
		got, _, err := resolveExecInRoot(tc.cmd, path, root, imageHidden, cs.exec, cs.literal)
		if tc.err != nil {
			if !errors.Is(err, tc.err) || got != "" {
				t.Errorf("%s: %q, %v; want %v", tc.cmd, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.cmd, got, err, tc.want)
		}
	}
}

// prepare with an exec root: argv[0] is the in-image path, cwd the host
// path inside the principal's workspace (the oci backend maps it to the
// profile's workspace dir), and the workspace goes to the sandbox's uid.
func TestPrepareExecRoot(t *testing.T) {
	root := imageRoot(t)
	be, _ := backends(t)
	r, err := New(Config{
		Backends: map[string]sandbox.Backend{"oci": be},
		Policies: map[string]sandbox.BackendPolicy{"oci": {ExecInRoot: true}},
		StateDir: t.TempDir(), Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown(t.Context()) })
	ws := t.TempDir()
	pol := CapsulePolicy{Exec: []string{"/bin/sh"}, Backend: "oci", Profile: "p", Workspace: ws, ExecRoot: root, ExecHidden: imageHidden, AllowPersistent: true}
	if os.Geteuid() == 0 {
		pol.WorkspaceOwner = &Owner{UID: 100000, GID: 100001}
	}
	if err := r.RegisterCapsule("img", pol); err != nil {
		t.Fatal(err)
	}
	o := owner{capsule: "img", principal: "alice"}
	if err := os.MkdirAll(filepath.Join(ws, "alice", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	pr, err := r.prepare(o, SpawnRequest{Cmd: "sh", Args: []string{"-c", "true"}, Cwd: "sub"}, &PersistOptions{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if pr.spec.Argv[0] != "/bin/sh" && pr.spec.Argv[0] != "/usr/bin/sh" {
		t.Errorf("argv[0] = %q, want an in-image path", pr.spec.Argv[0])
	}
	if want := filepath.Join(ws, "alice", "sub"); pr.spec.Cwd != want || pr.spec.Isolation.Workspace != filepath.Join(ws, "alice") {
		t.Errorf("cwd %q workspace %q", pr.spec.Cwd, pr.spec.Isolation.Workspace)
	}
	if pr.spec.Isolation.Profile != "p" || pr.spec.Isolation.Network {
		t.Errorf("isolation %+v", pr.spec.Isolation)
	}
	if os.Geteuid() == 0 {
		fi, err := os.Lstat(filepath.Join(ws, "alice"))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 100000 || st.Gid != 100001 {
			t.Errorf("workspace owned by %d:%d, want 100000:100001", st.Uid, st.Gid)
		}
	} else {
		t.Log("NOT RUN as non-root: the workspace chown (CI runs as root)")
	}
	// An oci policy without an exec root never falls back to the host.
	pol.ExecRoot = ""
	if err := r.RegisterCapsule("img", pol); err != nil {
		t.Fatal(err)
	}
	if _, err := r.prepare(o, SpawnRequest{Cmd: "/bin/sh"}, nil, false); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no exec root") {
		t.Errorf("oci without exec root: %v", err)
	}
}

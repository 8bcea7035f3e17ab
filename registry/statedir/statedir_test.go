package statedir

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

const holdRole = "statedir-test-hold-lock"

func init() {
	// The lock holder of TestLockDiesWithProcess: lock, say so, then wait
	// for stdin to close (or to be killed).
	reexec.Register(holdRole, func(args []string) int {
		l, err := Lock(args[0])
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("locked")
		io.Copy(io.Discard, os.Stdin)
		l.Close()
		return 0
	})
}

func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }

func TestLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	l, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir) // a second open file description conflicts too
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	want := fmt.Sprintf("state directory %s is in use by capsule-host pid %d", dir, os.Getpid())
	if le.PID != os.Getpid() || le.Stale || err.Error() != want {
		t.Fatalf("got %+v %q, want pid %d, %q", le, err, os.Getpid(), want)
	}
	if fi, err := os.Stat(l.Path()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v %v, want mode 0600", fi, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Lock(dir)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	l2.Close()
}

// TestLockDiesWithProcess: a daemon killed with SIGKILL leaves its
// directory free at once (flock), and while it lived the contender was
// told its PID.
func TestLockDiesWithProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := reexec.Command(holdRole, dir)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "locked\n" {
			t.Fatalf("child said %q", s)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("child did not lock within 30s")
	}
	_, err := Lock(dir)
	var le *LockedError
	if !errors.As(err, &le) || le.PID != cmd.Process.Pid || le.Stale {
		t.Fatalf("Lock while the child holds it: %v (%+v), want pid %d", err, le, cmd.Process.Pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := Lock(dir)
		if err == nil {
			l.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock still held 10s after the holder was killed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLockReportsStaleHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// As if the holder's PID were gone while the lock is still held (an
	// inherited descriptor): pid 0x7fffffff never exists.
	if err := os.WriteFile(l.Path(), []byte("2147483647 12345\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir)
	var le *LockedError
	if !errors.As(err, &le) || le.PID != 2147483647 || !le.Stale {
		t.Fatalf("got %v (%+v), want a stale holder 2147483647", err, le)
	}
}

func TestLockRefusesPublicDir(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	if _, err := Lock(dir); !errors.Is(err, ErrInsecure) {
		t.Fatalf("Lock of a 0777 dir: %v, want ErrInsecure", err)
	}
}

func TestCheckPrivateDir(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		name  string
		setup func(string) error
		want  error
	}{
		{"0700", func(d string) error { return os.Chmod(d, 0o700) }, nil},
		{"0755 (readable is fine)", func(d string) error { return os.Chmod(d, 0o755) }, nil},
		{"0770", func(d string) error { return os.Chmod(d, 0o770) }, ErrInsecure},
		{"0702", func(d string) error { return os.Chmod(d, 0o702) }, ErrInsecure},
		{"other owner", func(d string) error { return chownOther(t, d) }, ErrNotOwned},
		{"a file", func(d string) error { os.Remove(d); return os.WriteFile(d, nil, 0o600) }, ErrNotDir},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(root, strings.ReplaceAll(c.name, " ", "_"))
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := c.setup(d); err != nil {
				t.Fatal(err)
			}
			err := CheckPrivateDir(d)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("CheckPrivateDir = %v, want %v", err, c.want)
			}
			var fe *FileError
			if c.want != nil && (!errors.As(err, &fe) || fe.Path != d) {
				t.Fatalf("error %v does not name %s", err, d)
			}
		})
	}
}

// chownOther gives path to uid/gid 65534 (nobody); it needs root.
func chownOther(t *testing.T, path string) error {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	return os.Lchown(path, 65534, 65534)
}

func TestKeyCreateAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "keys", "id-hash.key")
	k1, err := LoadOrCreateKey(path, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != 32 || bytes.Equal(k1, make([]byte, 32)) {
		t.Fatalf("key %x", k1)
	}
	fi, _ := os.Stat(path)
	di, _ := os.Stat(filepath.Dir(path))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("modes: file %v dir %v, want 0600/0700", fi.Mode(), di.Mode())
	}
	k2, err := LoadOrCreateKey(path, 32)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("reload: %x %v, want %x", k2, err, k1)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("dir holds %v, want the key alone (no temporary left)", ents)
	}
}

func TestKeyConcurrentCreatorsAgree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := LoadOrCreateKey(path, 32)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if !bytes.Equal(k, keys[0]) {
			t.Fatalf("creators disagree: %x vs %x", k, keys[0])
		}
	}
}

func TestKeyRefused(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, path string) error
		want  error
	}{
		{"mode 0644", func(t *testing.T, p string) error { return os.Chmod(p, 0o644) }, ErrInsecure},
		{"mode 0400", func(t *testing.T, p string) error { return os.Chmod(p, 0o400) }, ErrInsecure},
		{"other owner", func(t *testing.T, p string) error { return chownOther(t, p) }, ErrNotOwned},
		{"symlink", func(t *testing.T, p string) error {
			os.Rename(p, p+".real")
			return os.Symlink(p+".real", p)
		}, ErrSymlink},
		{"short", func(t *testing.T, p string) error { return os.Truncate(p, 16) }, ErrSize},
		{"long", func(t *testing.T, p string) error { return os.Truncate(p, 33) }, ErrSize},
		{"a directory", func(t *testing.T, p string) error { os.Remove(p); return os.Mkdir(p, 0o700) }, ErrNotRegular},
		{"group-writable dir", func(t *testing.T, p string) error { return os.Chmod(filepath.Dir(p), 0o770) }, ErrInsecure},
		{"dir of another uid", func(t *testing.T, p string) error { return chownOther(t, filepath.Dir(p)) }, ErrNotOwned},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys", "k")
			if _, err := LoadOrCreateKey(path, 32); err != nil {
				t.Fatal(err)
			}
			if err := c.setup(t, path); err != nil {
				t.Fatal(err)
			}
			k, err := LoadOrCreateKey(path, 32)
			var fe *FileError
			if !errors.Is(err, c.want) || !errors.As(err, &fe) || k != nil {
				t.Fatalf("LoadOrCreateKey = %x, %v; want %v", k, err, c.want)
			}
			if fe.Path != path && fe.Path != filepath.Dir(path) {
				t.Fatalf("error names %s, want %s or its dir", fe.Path, path)
			}
		})
	}
}

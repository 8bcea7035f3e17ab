package config

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExampleParses(t *testing.T) {
	c, err := Load("../../capsule-host.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine != "wazero" || !*c.Bundled || c.CallTimeout.D() != 30*time.Second || c.Quotas.MaxConcurrent != 8 {
		t.Fatalf("unexpected example values: %+v", c)
	}
	if got := c.Backends.Enabled; len(got) != 1 || got[0] != "bwrap" {
		t.Fatalf("backends %v", got)
	}
	if c.Guests.MemoryBytes != DefaultGuestMemoryBytes || c.Guests.CapsuleMemoryBytes != DefaultCapsuleGuestMemoryBytes || c.Processes.Path != DefaultProcessPath ||
		c.Guests.LogLinesPerSec != DefaultGuestLogLinesPerSec || c.Guests.LogBurst != DefaultGuestLogBurst {
		t.Fatalf("guests %+v, processes.path %q: want the documented defaults", c.Guests, c.Processes.Path)
	}
}

// The guest memory ceilings and the process PATH parse, and default when
// absent.
// [mcp] principal names who `capsule-host mcp` acts for by default; unset,
// it is empty (no principal: the command refuses, never the fallback).
func TestMCPPrincipal(t *testing.T) {
	c, err := Parse("/etc/ch.toml", []byte("[mcp]\nprincipal = \"alice@example.org\"\n"))
	if err != nil || c.MCP.Principal != "alice@example.org" {
		t.Fatalf("mcp.principal: %+v %v", c.MCP, err)
	}
	if c := Default(); c.MCP.Principal != "" {
		t.Fatalf("default mcp.principal %q", c.MCP.Principal)
	}
}

func TestGuestsAndPath(t *testing.T) {
	c, err := Parse("/etc/g.toml", []byte("[guests]\nmemory_bytes = 67108864\ncapsule_memory_bytes = 536870912\n[processes]\npath = \"/opt/tools/bin:/usr/bin:/bin\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Guests.MemoryBytes != 64<<20 || c.Guests.CapsuleMemoryBytes != 512<<20 || c.Processes.Path != "/opt/tools/bin:/usr/bin:/bin" {
		t.Fatalf("guests %+v, path %q", c.Guests, c.Processes.Path)
	}
	d := Default()
	if d.Guests.MemoryBytes != DefaultGuestMemoryBytes || d.Guests.CapsuleMemoryBytes != DefaultCapsuleGuestMemoryBytes || d.Processes.Path != DefaultProcessPath {
		t.Fatalf("defaults: guests %+v, path %q", d.Guests, d.Processes.Path)
	}
}

func TestDefaults(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/tmp/xs")
	t.Setenv("XDG_RUNTIME_DIR", "")
	c := Default()
	if c.StateDir != "/tmp/xs/capsule-host" {
		t.Fatalf("state dir %q", c.StateDir)
	}
	if c.Socket != "/tmp/xs/capsule-host/capsule-host.sock" {
		t.Fatalf("socket %q", c.Socket)
	}
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/7")
	if s := DefaultSocket("/x"); s != "/run/user/7/capsule-host/capsule-host.sock" {
		t.Fatalf("socket %q", s)
	}
	if c.TCP.Listen != "" || !*c.Bundled || c.Engine != "wazero" || c.Backends.Enabled[0] != "bwrap" {
		t.Fatalf("unsafe defaults: %+v", c)
	}
}

func TestParseErrors(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	tests := []struct {
		name, src string
		line      int
		want      string
	}{
		{"unknown top key", "engine = \"wazero\"\nengin = \"x\"\n", 2, "engin: unknown key"},
		{"unknown nested key", "[quotas]\nmax_concurrent = 4\n\n[log]\nlevle = \"x\"\n", 5, "log.levle: unknown key"},
		{"wrong type", "[quotas]\nmax_concurrent = \"eight\"\n", 2, "incompatible types"},
		{"bad duration", "call_timeout = \"soon\"\n", 1, "not a duration"},
		{"bad engine", "\n\nengine = \"v8\"\n", 3, "unknown engine"},
		{"syntax", "engine = \n", 1, ""},
		{"plain token", "[principals.alice]\ntoken_sha256 = [\"hunter2\"]\n", 2, "not a lowercase hex SHA-256"},
		{"no tokens", "[principals.alice]\n", 1, "missing"},
		{"dup token", "[principals.a]\ntoken_sha256 = [\"" + hash + "\"]\n[principals.b]\ntoken_sha256 = [\"" + hash + "\"]\n", 4, "exactly one principal"},
		{"bad principal", "[principals.\"a b\"]\ntoken_sha256 = [\"" + hash + "\"]\n", 1, "invalid principal"},
		{"not loopback", "[tcp]\nlisten = \"0.0.0.0:80\"\n[principals.a]\ntoken_sha256 = [\"" + hash + "\"]\n", 2, "not a loopback"},
		// A host name that merely starts with "127." resolves wherever its
		// owner likes: only loopback IP literals (and "localhost") pass.
		{"loopback-looking host name", "[tcp]\nlisten = \"127.attacker.example:80\"\n[principals.a]\ntoken_sha256 = [\"" + hash + "\"]\n", 2, "not a loopback"},
		{"bad port", "[tcp]\nlisten = \"127.0.0.1:http\"\n[principals.a]\ntoken_sha256 = [\"" + hash + "\"]\n", 2, "port"},
		{"tcp without principals", "[tcp]\nlisten = \"127.0.0.1:80\"\n", 2, "needs at least one"},
		{"bad backend", "[backends]\nenabled = [\"docker\"]\n", 2, "unknown backend"},
		{"profile without oci", "[profiles.deb]\nrootfs = \"/r\"\n", 1, "need the oci backend"},
		{"profile no rootfs", "[backends]\nenabled=[\"oci\"]\n[profiles.deb]\nnetwork = \"none\"\n", 3, "rootfs: missing"},
		{"profile bad net", "[backends]\nenabled=[\"oci\"]\n[profiles.deb]\nrootfs = \"/r\"\nnetwork = \"bridge\"\n", 5, "unknown network"},
		{"profile no limits", "[backends]\nenabled=[\"oci\"]\n[profiles.deb]\nrootfs = \"/r\"\n", 3, "memory_bytes and pids are required"},
		{"profile unknown runtime", "[backends]\nenabled=[\"oci\"]\n[backends.oci.runtimes]\nrunc = \"runc\"\n[profiles.deb]\nrootfs = \"/r\"\nruntime = \"kata\"\n[profiles.deb.limits]\nmemory_bytes = 1\npids = 1\n", 7, "not in backends.oci.runtimes"},
		{"negative quota", "[quotas]\nmax_entries = -1\n", 2, "negative"},
		{"guest memory not a page multiple", "[guests]\nmemory_bytes = 1000000\n", 2, "guests.memory_bytes: 1000000 is not a multiple of 65536"},
		{"guest memory 4 GiB", "[guests]\n\nmemory_bytes = 4294967296\n", 3, "guests.memory_bytes: 4294967296 is not a multiple"},
		{"guest memory negative", "[guests]\nmemory_bytes = -65536\n", 2, "guests.memory_bytes"},
		{"guest memory type", "[guests]\nmemory_bytes = \"256MiB\"\n", 2, "incompatible types"},
		{"guest memory unknown key", "[guests]\nmax_memory = 1\n", 2, "guests.max_memory: unknown key"},
		{"capsule memory below one instance", "[guests]\nmemory_bytes = 1048576\ncapsule_memory_bytes = 65536\n", 3, "guests.capsule_memory_bytes: 65536 is out of range [1048576"},
		{"capsule memory below default instance", "[guests]\ncapsule_memory_bytes = 1048576\n", 2, "out of range [268435456"},
		{"guest log rate negative", "[guests]\nlog_lines_per_sec = -5\n", 2, "guests.log_lines_per_sec: -5 is out of range"},
		{"guest log burst too large", "[guests]\nlog_burst = 2000000\n", 2, "guests.log_burst: 2000000 is out of range"},
		{"relative process path", "[processes]\npath = \"/usr/bin::bin\"\n", 2, "processes.path"},
		{"negative cluster capacity", "[cluster]\ncapacity = -2\n", 2, "cluster.capacity"},
		{"unknown placement", "[cluster]\nplacement = \"random\"\n", 2, "cluster.placement: \"random\""},
		{"tls without key", "[cluster]\ntls_ca = \"ca.pem\"\ntls_cert = \"a.pem\"\n", 2, "go together"},
		{"etcd cert without key", "[cluster]\netcd_ca = \"ca.pem\"\netcd_cert = \"a.pem\"\n", 3, "cluster.etcd_cert: etcd_cert and etcd_key go together"},
		{"etcd cert without ca", "[cluster]\netcd_cert = \"a.pem\"\netcd_key = \"a.key\"\n", 1, "cluster.etcd_ca: missing"},
		{"unknown profile key", "[backends]\nenabled=[\"oci\"]\n[profiles.deb]\nrootfs = \"/r\"\nimage = \"x\"\n", 5, "unknown key"},
		{"mcp principal owner-fallback", "[mcp]\nprincipal = \"owner:shell\"\n", 2, "mcp.principal: \"owner:shell\" is a capsule's owner-fallback principal"},
		{"mcp principal grammar", "\n[mcp]\nprincipal = \"al ice\"\n", 3, "mcp.principal: invalid principal name"},
		{"mcp unknown key", "[mcp]\nprincipals = \"alice\"\n", 2, "mcp.principals: unknown key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("/etc/ch.toml", []byte(tc.src))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("not ErrInvalid: %v", err)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("not *Error: %T %v", err, err)
			}
			if ce.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", ce.Line, tc.line, err)
			}
			if !strings.HasPrefix(err.Error(), "/etc/ch.toml:") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %q lacks file prefix or %q", err, tc.want)
			}
		})
	}
}

func TestRelativePathsAndTokens(t *testing.T) {
	dir := t.TempDir()
	tok := sha256.Sum256([]byte("s3cret"))
	src := "state_dir = \"state\"\ncapsules = [\"caps/one\"]\n[tcp]\nlisten = \"127.0.0.1:0\"\n[principals.alice]\ntoken_sha256 = [\"" +
		hexOf(tok) + "\"]\n[backends]\nenabled = [\"local\", \"oci\"]\n[profiles.deb]\nrootfs = \"rootfs\"\n[profiles.deb.limits]\nmemory_bytes = 1000000\npids = 10\n"
	p := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != filepath.Join(dir, "state") || c.Capsules[0] != filepath.Join(dir, "caps/one") || c.Profiles["deb"].Rootfs != filepath.Join(dir, "rootfs") {
		t.Fatalf("paths not resolved: %+v", c)
	}
	if c.WorkspaceRoot != filepath.Join(dir, "state", "workspaces") {
		t.Fatalf("workspace %q", c.WorkspaceRoot)
	}
	if n, ok := c.PrincipalForTokenHash(tok); !ok || n != "alice" {
		t.Fatalf("token → %q %v", n, ok)
	}
	if _, ok := c.PrincipalForTokenHash(sha256.Sum256([]byte("other"))); ok {
		t.Fatal("unknown token mapped")
	}
	if c.Profiles["deb"].Network != "none" || c.Profiles["deb"].WorkspaceDir != "/workspace" || c.Profiles["deb"].Runtime != "runc" {
		t.Fatalf("profile defaults %+v", c.Profiles["deb"])
	}
}

func hexOf(b [32]byte) string {
	const h = "0123456789abcdef"
	out := make([]byte, 64)
	for i, c := range b {
		out[2*i], out[2*i+1] = h[c>>4], h[c&15]
	}
	return string(out)
}

func TestSetStateDir(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("XDG_STATE_HOME", "/tmp/a")
	c := Default()
	c.SetStateDir("/tmp/b")
	if c.StateDir != "/tmp/b" || c.WorkspaceRoot != "/tmp/b/workspaces" || c.Socket != "/tmp/b/capsule-host.sock" || c.Backends.OCI.Root != "/tmp/b/oci" {
		t.Fatalf("%+v", c)
	}
	c, err := Parse("/x/c.toml", []byte("socket = \"/run/s.sock\"\nworkspace_root = \"/w\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetStateDir("/tmp/c")
	if c.Socket != "/run/s.sock" || c.WorkspaceRoot != "/w" {
		t.Fatalf("explicit paths moved: %+v", c)
	}
}

// The example's commented launch profile documents real keys: uncommented,
// it parses.
func TestExampleProfileParses(t *testing.T) {
	b, err := os.ReadFile("../../capsule-host.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(b), `enabled = ["bwrap"]`, `enabled = ["bwrap", "oci"]`, 1)
	i := strings.Index(src, "# [profiles.debian]")
	if i < 0 {
		t.Fatal("the example has no commented profile")
	}
	var out []string
	for _, l := range strings.Split(src[i:], "\n") {
		out = append(out, strings.TrimPrefix(l, "# "))
	}
	c, err := Parse("/etc/example.toml", []byte(src[:i]+strings.Join(out, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Profiles["debian"]
	if p.Limits.MemoryBytes != 536870912 || p.Limits.Pids != 256 || p.UserNS == nil || p.UserNS.Size != 65536 ||
		len(p.ReadonlyBinds) != 1 || p.Limits.CPUTime.D() != 10*time.Minute || p.CPUs != 1.0 {
		t.Fatalf("%+v", p)
	}
}

// The defaults isolate and bound: bwrap, an unprivileged sandbox user, and
// every process ceiling set, in the example too.
func TestDefaultsIsolateAndBound(t *testing.T) {
	b, err := os.ReadFile("../../capsule-host.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := Parse("/etc/example.toml", b)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Config{Default(), ex} {
		if c.Backends.Bwrap.UID != DefaultSandboxID || c.Backends.Bwrap.GID != DefaultSandboxID {
			t.Errorf("sandbox ids %d:%d", c.Backends.Bwrap.UID, c.Backends.Bwrap.GID)
		}
		l := c.Limits
		if l.Pids != DefaultPids || l.MemoryBytes != DefaultMemoryBytes || l.OpenFiles != DefaultOpenFiles || l.CPUTime.D() != DefaultCPUTime {
			t.Errorf("limits %+v: want the defaults", l)
		}
	}
	if _, err := Parse("/x.toml", []byte("[backends.bwrap]\nuid = -1\n")); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative uid: %v", err)
	}
	c, err := Parse("/x.toml", []byte("[limits]\npids = 64\n"))
	if err != nil || c.Limits.Pids != 64 || c.Limits.MemoryBytes != DefaultMemoryBytes {
		t.Errorf("pids = 64: %+v %v", c, err)
	}
}

// FuzzParse is the daemon's config parser: any file is either refused
// with an error or gives a config whose limits, quotas and sizes are not
// negative (check.go's promise) — never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "[limits]\npids = 64\n", "[processes]\nspill_bytes = -1\n", "[processes]\noutput_rate_bytes = 1024\noutput_burst_bytes = 4096\n",
		"[guests]\nmemory_bytes = 67108864\n", "socket = \"/run/x.sock\"\n[backends]\nenabled = [\"local\"]\n", "[[x]]\n", "a = 1\na = 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.toml", data)
		if err != nil {
			return
		}
		if c.Limits.MemoryBytes < 0 || c.Limits.Pids < 0 || c.Limits.OpenFiles < 0 || c.Processes.SpillBytes < 0 || c.Processes.OutputBurstBytes < 0 || c.Quotas.MaxConcurrent < 0 {
			t.Fatalf("accepted negative values: %+v", c)
		}
	})
}

package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/capsule-host/capsule-host/host/internal/stricttoml"
)

// checker holds what Parse's validation steps share: the file (for
// messages and line numbers) and its directory (for relative paths).
type checker struct {
	file  string
	lines stricttoml.Lines
	base  string
}

// fail is a problem at key, with the key's line.
func (ck *checker) fail(key, format string, a ...any) error {
	return &Error{File: ck.file, Line: ck.lines.Find(key), Key: key, Msg: fmt.Sprintf(format, a...)}
}

// abs makes a relative path absolute against the file's directory.
func (ck *checker) abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(ck.base, p)
}

// top checks the engine, the paths, the log level and the TCP listener.
func (ck *checker) top(c *Config) error {
	if c.Engine != "" && !slices.Contains(knownEngines, c.Engine) {
		return ck.fail("engine", "unknown engine %q (want one of %s)", c.Engine, strings.Join(knownEngines, ", "))
	}
	c.StateDir = ck.abs(c.StateDir)
	c.WorkspaceRoot = ck.abs(c.WorkspaceRoot)
	c.Socket = ck.abs(c.Socket)
	c.CacheDir = ck.abs(c.CacheDir)
	for i, d := range c.Capsules {
		if d == "" {
			return ck.fail("capsules", "empty capsule directory")
		}
		c.Capsules[i] = ck.abs(d)
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		return ck.fail("log.level", "unknown level %q (want debug, info, warn or error)", c.Log.Level)
	}
	if c.TCP.Listen != "" {
		if err := checkLoopback(c.TCP.Listen); err != nil {
			return ck.fail("tcp.listen", "%v", err)
		}
		if len(c.Principals) == 0 {
			return ck.fail("tcp.listen", "the TCP listener needs at least one [principals.NAME] with token_sha256")
		}
	}
	return nil
}

// principals checks names and token hashes, in name order (a token hash
// maps to exactly one principal), and mcp.principal.
func (ck *checker) principals(c *Config) error {
	seen := map[string]string{}
	names := make([]string, 0, len(c.Principals))
	for n := range c.Principals {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		key := stricttoml.Key("principals", n)
		if !principalName().MatchString(n) {
			return ck.fail(key, "invalid principal name %q", n)
		}
		p := c.Principals[n]
		if len(p.TokenSHA256) == 0 {
			return ck.fail(key+".token_sha256", "missing: list at least one token hash (capsule-host token prints one)")
		}
		for _, h := range p.TokenSHA256 {
			if !hexSHA256().MatchString(h) {
				return ck.fail(key+".token_sha256", "%q is not a lowercase hex SHA-256 (64 characters); store the hash, never the token", h)
			}
			if other, dup := seen[h]; dup {
				return ck.fail(key+".token_sha256", "token hash also belongs to principal %q: a token maps to exactly one principal", other)
			}
			seen[h] = n
		}
	}
	if p := c.MCP.Principal; p != "" {
		if !principalName().MatchString(p) {
			return ck.fail("mcp.principal", "invalid principal name %q (want [A-Za-z0-9][A-Za-z0-9._@:-]{0,127})", p)
		}
		if strings.HasPrefix(p, OwnerFallbackPrefix) {
			return ck.fail("mcp.principal", "%q is a capsule's owner-fallback principal, which cannot hold persistent processes and may not be claimed: name a principal of your own", p)
		}
	}
	return nil
}

// limits checks that no limit, quota or size is negative.
func (ck *checker) limits(c *Config) error {
	if c.Limits.MemoryBytes < 0 || c.Limits.Pids < 0 || c.Limits.OpenFiles < 0 {
		return ck.fail("limits", "must not be negative")
	}
	for _, q := range []struct {
		key string
		v   int
	}{{"quotas.max_concurrent", c.Quotas.MaxConcurrent}, {"quotas.max_retained", c.Quotas.MaxRetained}, {"quotas.max_entries", c.Quotas.MaxEntries}, {"processes.log_ring_bytes", c.Processes.LogRingBytes}} {
		if q.v < 0 {
			return ck.fail(q.key, "must not be negative")
		}
	}
	if c.Processes.SpillBytes < 0 {
		return ck.fail("processes.spill_bytes", "must not be negative")
	}
	if c.Processes.OutputBurstBytes < 0 {
		return ck.fail("processes.output_burst_bytes", "must not be negative")
	}
	if c.Cluster.Capacity < 0 {
		return ck.fail("cluster.capacity", "must not be negative")
	}
	if cl := c.Cluster; (cl.TLSCA == "") != (cl.TLSCert == "") || (cl.TLSCA == "") != (cl.TLSKey == "") {
		return ck.fail("cluster.tls_ca", "tls_ca, tls_cert and tls_key go together (mutual TLS between nodes needs all three)")
	}
	if cl := c.Cluster; (cl.EtcdCert == "") != (cl.EtcdKey == "") {
		return ck.fail("cluster.etcd_cert", "etcd_cert and etcd_key go together (the client certificate and its key)")
	}
	if cl := c.Cluster; cl.EtcdCert != "" && cl.EtcdCA == "" {
		return ck.fail("cluster.etcd_ca", "missing: etcd_cert needs etcd_ca (TLS to etcd trusts only the CA given)")
	}
	if p := c.Cluster.Placement; p != "" && p != "local-first" && p != "least-loaded" && p != "local" {
		return ck.fail("cluster.placement", "%q: want local-first, least-loaded or local", p)
	}
	if o := c.Processes.OnShutdown; o != "" && o != OnShutdownKeep && o != OnShutdownStop {
		return ck.fail("processes.on_shutdown", "%q: want %q (processes run on for the next daemon) or %q", o, OnShutdownKeep, OnShutdownStop)
	}
	if c.Processes.Path != "" {
		for _, d := range strings.Split(c.Processes.Path, ":") {
			if !filepath.IsAbs(d) {
				return ck.fail("processes.path", "%q: every entry must be an absolute directory (an empty or relative one would search the working directory, the workspace)", d)
			}
		}
	}
	return nil
}

// guests range-checks the guest memory ceilings (0: the default).
func (ck *checker) guests(c *Config) error {
	g := c.Guests
	if m := g.MemoryBytes; m != 0 && (m < wasmPage || m > maxGuestMemoryBytes || m%wasmPage != 0) {
		return ck.fail("guests.memory_bytes", "%d is not a multiple of %d (the wasm page) in [%d, %d]", m, wasmPage, wasmPage, maxGuestMemoryBytes)
	}
	per := g.MemoryBytes
	if per == 0 {
		per = DefaultGuestMemoryBytes
	}
	if t := g.CapsuleMemoryBytes; t != 0 && (t < per || t > 1<<40) {
		return ck.fail("guests.capsule_memory_bytes", "%d is out of range [%d (guests.memory_bytes: one instance), %d]", t, per, int64(1<<40))
	}
	if n := g.LogLinesPerSec; n < 0 || n > 1_000_000 {
		return ck.fail("guests.log_lines_per_sec", "%d is out of range [1, 1000000] (0: the default, 100)", n)
	}
	if n := g.LogBurst; n < 0 || n > 1_000_000 {
		return ck.fail("guests.log_burst", "%d is out of range [1, 1000000] (0: the default, 1000)", n)
	}
	return nil
}

// backends checks the enabled backends and their paths.
func (ck *checker) backends(c *Config) error {
	for _, b := range c.Backends.Enabled {
		if !slices.Contains(knownBackends, b) {
			return ck.fail("backends.enabled", "unknown backend %q (want local, bwrap or oci)", b)
		}
	}
	c.Backends.Bwrap.Path = ck.abs(c.Backends.Bwrap.Path)
	if c.Backends.Bwrap.UID < 0 || c.Backends.Bwrap.GID < 0 {
		return ck.fail("backends.bwrap", "uid and gid must be positive (0: the default %d; root is never a sandbox user)", DefaultSandboxID)
	}
	for _, m := range c.Backends.Bwrap.Mask {
		if !filepath.IsAbs(m) {
			return ck.fail("backends.bwrap.mask", "%q is not an absolute path", m)
		}
	}
	if len(c.Profiles) > 0 && !slices.Contains(c.Backends.Enabled, "oci") {
		return ck.fail("profiles", "launch profiles need the oci backend in backends.enabled")
	}
	c.Backends.OCI.Root = ck.abs(c.Backends.OCI.Root)
	c.Backends.OCI.Init = ck.abs(c.Backends.OCI.Init)
	return nil
}

// profiles checks every launch profile (after backends: a profile's
// runtime must be one of backends.oci.runtimes).
func (ck *checker) profiles(c *Config) error {
	for n, p := range c.Profiles {
		p, err := ck.profile(c, n, p)
		if err != nil {
			return err
		}
		c.Profiles[n] = p
	}
	return nil
}

// profile checks one launch profile and makes its rootfs absolute.
func (ck *checker) profile(c *Config, n string, p Profile) (Profile, error) {
	key := stricttoml.Key("profiles", n)
	if !profileName().MatchString(n) {
		return p, ck.fail(key, "invalid profile name %q (lowercase letters, digits, - and _)", n)
	}
	if p.Rootfs == "" {
		return p, ck.fail(key+".rootfs", "missing: a profile needs a root filesystem directory")
	}
	p.Rootfs = ck.abs(p.Rootfs)
	switch p.Network {
	case "", "none", "loopback", "host":
	default:
		return p, ck.fail(key+".network", "unknown network mode %q (want none, loopback or host)", p.Network)
	}
	if p.Limits.MemoryBytes <= 0 || p.Limits.Pids <= 0 {
		return p, ck.fail(key+".limits", "memory_bytes and pids are required (> 0): a profile that cannot bound memory and forks does not protect the host")
	}
	if p.Runtime != "" {
		_, ok := c.Backends.OCI.Runtimes[p.Runtime]
		if len(c.Backends.OCI.Runtimes) == 0 {
			ok = p.Runtime == "runc"
		}
		if !ok {
			return p, ck.fail(key+".runtime", "runtime %q is not in backends.oci.runtimes", p.Runtime)
		}
	}
	for i, b := range p.ReadonlyBinds {
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Destination) {
			return p, ck.fail(key+".readonly_binds", "bind %d: source and destination must be absolute paths", i+1)
		}
	}
	for _, e := range p.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return p, ck.fail(key+".env", "%q is not KEY=VALUE", e)
		}
	}
	return p, nil
}

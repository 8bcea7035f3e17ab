// Package config reads the host configuration file, capsule-host.toml.
//
// Parsing is strict, as for capsule manifests: an unknown key, a value of
// the wrong type or an invalid value is an error naming the file, the line
// and the key, because a typo in a security setting (a token hash, a
// backend, a quota) must never be silently ignored.
//
// With no file at all, Default gives the safe defaults: the bundled
// capsules, the bwrap backend, process ceilings, and the unix socket only.
package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/host/internal/stricttoml"
)

// ErrInvalid is the class of every configuration error.
var ErrInvalid = errors.New("invalid host config")

// Engines the config may name. Whether one is compiled in is checked by
// the host, which knows the build.
var knownEngines = []string{"wazero", "wasmtime"}

// Backends the config may enable.
var knownBackends = []string{"local", "bwrap", "oci"}

// Config is the parsed host configuration. Paths are absolute after Load
// (relative paths are resolved against the file's directory).
type Config struct {
	// Path is the file this came from ("" for defaults).
	Path string `toml:"-"`

	// Engine is "wazero" (default) or "wasmtime" (build tag wasmtime).
	Engine string `toml:"engine"`
	// StateDir holds spill files, extracted bundled capsules, the module
	// cache and (without XDG_RUNTIME_DIR) the socket.
	StateDir string `toml:"state_dir"`
	// WorkspaceRoot is where each capsule's process workspace is created
	// (default <state_dir>/workspaces).
	WorkspaceRoot string `toml:"workspace_root"`
	// Socket is the unix socket path of the API.
	Socket string `toml:"socket"`
	// CacheDir holds compiled modules, one subdirectory per engine
	// (default <state_dir>/cache; $CAPSULE_HOST_CACHE_DIR overrides it).
	// It may be shared by several daemons of one user, so a module is
	// compiled once for all of them (the guard locks and checks entries).
	CacheDir string `toml:"cache_dir"`
	// Bundled loads the capsules compiled into the binary (default true).
	Bundled *bool `toml:"bundled"`
	// Capsules are capsule directories (each holding a Capsule.toml).
	Capsules []string `toml:"capsules"`
	// CallTimeout bounds one tool call (default 30s).
	CallTimeout Duration `toml:"call_timeout"`
	// ShutdownGrace bounds how long in-flight calls may run after SIGTERM
	// before they are cancelled (default 10s).
	ShutdownGrace Duration `toml:"shutdown_grace"`
	// AllowNetwork is the host-wide ceiling for the manifests' network
	// capability (default false).
	AllowNetwork bool `toml:"allow_network"`

	Log        Log                  `toml:"log"`
	TCP        TCP                  `toml:"tcp"`
	Principals map[string]Principal `toml:"principals"`
	MCP        MCP                  `toml:"mcp"`
	Quotas     Quotas               `toml:"quotas"`
	Limits     ProfileLimits        `toml:"limits"`
	Processes  Processes            `toml:"processes"`
	Guests     Guests               `toml:"guests"`
	Backends   Backends             `toml:"backends"`
	Profiles   map[string]Profile   `toml:"profiles"`
	Cluster    Cluster              `toml:"cluster"`
}

// Cluster is cluster mode (several daemons, one directory in etcd). Off
// unless URL is set (or serve --cluster).
type Cluster struct {
	// URL is etcd://host:port[,host:port...][/cluster-name].
	URL string `toml:"url"`
	// Node is this daemon's name in the cluster (default: the hostname).
	Node string `toml:"node"`
	// Listen is the node-to-node listener, host:port; Advertise is the
	// address other nodes dial (default Listen).
	Listen    string `toml:"listen"`
	Advertise string `toml:"advertise"`
	// KeyFile holds the cluster's shared secret (at least 32 bytes): it
	// keys the directory's process names and the node-to-node token.
	KeyFile string `toml:"key_file"`
	// LeaseTTL is how long a dead node's processes answer unavailable
	// before they are lost (default 10s).
	LeaseTTL Duration `toml:"lease_ttl"`
	// Capacity is how many processes (both tiers) this node runs at once;
	// beyond it a spawn is placed on another node or refused
	// (registry-full). Default quotas.max_entries.
	Capacity int `toml:"capacity"`
	// Placement picks the node of a persistent spawn: local-first
	// (default: here while under capacity, else the least-loaded node),
	// least-loaded, or local.
	Placement string `toml:"placement"`
	// LostGrace is how long the records of a node whose lease expired are
	// kept (answering "lost") before any live node deletes them (default
	// 1h).
	LostGrace Duration `toml:"lost_grace"`
	// TLSCA, TLSCert and TLSKey (PEM files, all or none) switch the
	// node-to-node channel to mutual TLS 1.3: each node presents its
	// certificate (a DNS name equal to its node name) signed by the
	// operator's cluster CA and accepts only peers signed by it. The
	// cluster token is still required on top.
	TLSCA   string `toml:"tls_ca"`
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// EtcdCA (PEM) switches the etcd client to TLS (https endpoints),
	// trusting only this CA; EtcdCert and EtcdKey (both or neither) are
	// the node's client certificate, for an etcd run with
	// --client-cert-auth. Without EtcdCA the client speaks plain http.
	EtcdCA   string `toml:"etcd_ca"`
	EtcdCert string `toml:"etcd_cert"`
	EtcdKey  string `toml:"etcd_key"`
}

// Log configures the daemon's log.
type Log struct {
	// Level is debug, info (default), warn or error.
	Level string `toml:"level"`
	// JSON switches from text (for people) to JSON lines (for machines).
	JSON bool `toml:"json"`
}

// TCP is the optional loopback listener. Off unless Listen is set.
type TCP struct {
	// Listen is a loopback host:port, e.g. "127.0.0.1:7878".
	Listen string `toml:"listen"`
}

// Principal is one named principal that may call over TCP.
type Principal struct {
	// TokenSHA256 lists the lowercase hex SHA-256 of each bearer token
	// that authenticates as this principal. Tokens themselves are never
	// stored.
	TokenSHA256 []string `toml:"token_sha256"`
}

// MCP configures `capsule-host mcp`, the MCP server MCP clients spawn.
type MCP struct {
	// Principal is who `capsule-host mcp` acts for when neither
	// --principal nor $CAPSULE_HOST_PRINCIPAL names one (over TCP the
	// token decides, and a different name here is refused). Never an
	// owner-fallback principal ("owner:CAPSULE"): those cannot hold
	// persistent processes, and no caller may claim them.
	Principal string `toml:"principal"`
}

// OwnerFallbackPrefix begins every capsule's owner-fallback principal
// ("owner:CAPSULE", the host's default), which no configured principal
// may take.
const OwnerFallbackPrefix = "owner:"

// Quotas are the host's per-capsule process caps; manifests only lower them.
type Quotas struct {
	MaxConcurrent int `toml:"max_concurrent"` // per (capsule, principal), default 8
	MaxRetained   int `toml:"max_retained"`   // per (capsule, principal), default 32
	MaxEntries    int `toml:"max_entries"`    // per capsule, default 256
}

// Processes are the registry's defaults and ceilings for process options.
// Zero means the registry's built-in default.
type Processes struct {
	// Path is the PATH of every process and of the exec check's lookup of
	// bare names (default DefaultProcessPath, never the daemon's own PATH); a
	// guest cannot set PATH.
	Path         string `toml:"path"`
	LogRingBytes int    `toml:"log_ring_bytes"`
	SpillBytes   int64  `toml:"spill_bytes"`
	// OutputRateBytes and OutputBurstBytes bound each output stream's
	// capture rate (registry.Defaults.OutputRate: default 4 MiB/s, 16 MiB
	// burst; a chatty process is throttled, never truncated); a negative
	// rate turns the bound off.
	OutputRateBytes  int64    `toml:"output_rate_bytes"`
	OutputBurstBytes int64    `toml:"output_burst_bytes"`
	MaxLifetime      Duration `toml:"max_lifetime"`
	IdleTimeout      Duration `toml:"idle_timeout"`
	ExitRetention    Duration `toml:"exit_retention"`
	WaitCap          Duration `toml:"wait_cap"`
	StopGrace        Duration `toml:"stop_grace"`
	StopGraceCap     Duration `toml:"stop_grace_cap"`
	// OnShutdown is what `serve` does with running persistent processes
	// when it stops: "keep" (default) leaves them to their keeper for the
	// next daemon, which re-adopts them; "stop" stops them all.
	OnShutdown string `toml:"on_shutdown"`
}

// The values of processes.on_shutdown.
const (
	OnShutdownKeep = "keep"
	OnShutdownStop = "stop"
)

// Guests bounds the guests' own (wasm linear) memory, as opposed to
// [limits], which bounds the processes they start.
type Guests struct {
	// MemoryBytes caps each instance's linear memory (default
	// DefaultGuestMemoryBytes; a multiple of 64 KiB, below 4 GiB). A
	// manifest's pool.memory_bytes may only lower it.
	MemoryBytes int64 `toml:"memory_bytes"`
	// CapsuleMemoryBytes caps one capsule's pool: pool.max times the
	// per-instance limit may not exceed it, or the manifest is refused at
	// load (default DefaultCapsuleGuestMemoryBytes).
	CapsuleMemoryBytes int64 `toml:"capsule_memory_bytes"`
	// LogLinesPerSec and LogBurst bound the lines one capsule's guests
	// write to the daemon's log (defaults 100 per second, bursts of 1,000);
	// lines over the rate are dropped and counted in the log.
	LogLinesPerSec int `toml:"log_lines_per_sec"`
	LogBurst       int `toml:"log_burst"`
}

// Backends selects and configures execution backends.
type Backends struct {
	// Enabled lists the backends to construct (default ["bwrap"]).
	Enabled []string `toml:"enabled"`
	Bwrap   Bwrap    `toml:"bwrap"`
	OCI     OCI      `toml:"oci"`
}

// Bwrap configures the bubblewrap backend.
type Bwrap struct {
	// Path of the bwrap binary (default: looked up in PATH).
	Path string `toml:"path"`
	// Mask lists more absolute host paths hidden inside every sandbox
	// (the state directory, the workspace root, the API socket and the
	// operator's credentials always are).
	Mask []string `toml:"mask"`
	// UID and GID are the unprivileged host ids the sandboxed programs
	// run as when the daemon runs as root (default DefaultSandboxID,
	// nobody:nogroup). Never 0: sandbox root would be host root.
	UID int `toml:"uid"`
	GID int `toml:"gid"`
}

// OCI configures the OCI backend.
type OCI struct {
	// Runtimes maps a runtime name, as profiles use it, to its binary: an
	// absolute path or a name looked up in PATH. Default: runc from PATH.
	// runsc (gVisor) works too.
	Runtimes map[string]string `toml:"runtimes"`
	// Root is the runtime's state directory (default <state_dir>/oci).
	Root string `toml:"root"`
	// Init is the statically linked capsule-oci-init run as each
	// container's pid 1 (build: gcc -static -Os -o capsule-oci-init
	// sandbox/oci/init/capsule-oci-init.c). Default: capsule-oci-init
	// beside the capsule-host binary, else in PATH; without one a
	// container's process is its pid 1 and ignores a graceful SIGTERM.
	Init string `toml:"init"`
}

// Profile is one OCI launch profile, named by manifests
// (capabilities.profile). It mirrors sandbox/oci.Profile: the operator
// decides every mount, id and limit; a guest can only ask for less.
type Profile struct {
	// Runtime names an entry of backends.oci.runtimes (default "runc").
	Runtime string `toml:"runtime"`
	// Rootfs is the container root filesystem directory, always mounted
	// read-only.
	Rootfs string `toml:"rootfs"`
	// WorkspaceDir is where the capsule workspace appears inside
	// (default "/workspace").
	WorkspaceDir string `toml:"workspace_dir"`
	// ReadonlyBinds are extra read-only bind mounts.
	ReadonlyBinds []Bind `toml:"readonly_binds"`
	// Network is "none" (default), "loopback" or "host"; "host" is given
	// only to capsules granted network (manifest and allow_network).
	Network string `toml:"network"`
	// UserNS maps container root to unprivileged host ids.
	UserNS *IDMap `toml:"userns"`
	// UID and GID inside the container.
	UID uint32 `toml:"uid"`
	GID uint32 `toml:"gid"`
	// Capabilities kept; everything else is dropped.
	Capabilities  []string `toml:"capabilities"`
	MaskedPaths   []string `toml:"masked_paths"`
	ReadonlyPaths []string `toml:"readonly_paths"`
	// Env is extra KEY=VALUE pairs set in the container.
	Env []string `toml:"env"`
	// Limits are ceilings; memory_bytes and pids are required.
	Limits ProfileLimits `toml:"limits"`
	// CPUs is a CFS quota in cores (0.5: half a core); 0: none.
	CPUs float64 `toml:"cpus"`
}

// Bind is a read-only bind mount of a launch profile.
type Bind struct {
	Source      string `toml:"source"`
	Destination string `toml:"destination"`
}

// IDMap maps container root onto host ids.
type IDMap struct {
	HostUID uint32 `toml:"host_uid"`
	HostGID uint32 `toml:"host_gid"`
	Size    uint32 `toml:"size"`
}

// ProfileLimits are resource ceilings: of a launch profile, or (as
// [limits]) of every process on the host. 0 means no ceiling.
type ProfileLimits struct {
	MemoryBytes int64    `toml:"memory_bytes"`
	CPUTime     Duration `toml:"cpu_time"`
	Pids        int      `toml:"pids"`
	OpenFiles   int      `toml:"open_files"`
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// UnmarshalText parses "30s", "5m", "1h30m".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration %q (want e.g. \"30s\", \"5m\")", string(b))
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", string(b))
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Defaults applied when a field is zero.
const (
	DefaultEngine        = "wazero"
	DefaultCallTimeout   = 30 * time.Second
	DefaultShutdownGrace = 10 * time.Second
	// DefaultProcessPath is processes.path's default: fixed, so what a bare
	// command runs does not depend on how the daemon was started.
	DefaultProcessPath = "/usr/local/bin:/usr/bin:/bin"
	// DefaultGuestMemoryBytes and DefaultCapsuleGuestMemoryBytes are the
	// host's (host.DefaultGuestMemoryBytes, ...): 256 MiB per instance,
	// 2 GiB per capsule (the default pool.max of 8 at 256 MiB).
	DefaultGuestMemoryBytes        = 256 << 20
	DefaultCapsuleGuestMemoryBytes = 2 << 30
	// DefaultGuestLogLinesPerSec and DefaultGuestLogBurst are the host's
	// guest log rate (host.DefaultGuestLogLinesPerSec, ...).
	DefaultGuestLogLinesPerSec = 100
	DefaultGuestLogBurst       = 1000
	// DefaultSandboxID is backends.bwrap.uid's and gid's default: the
	// conventional unprivileged nobody/nogroup (65534).
	DefaultSandboxID = 65534
	// Default process ceilings ([limits]): what one process tree of any
	// capsule may use unless the operator says otherwise. Generous for
	// shell work (a compiler, a test suite), small enough that a fork
	// bomb or a memory hog of one principal does not take the host.
	DefaultPids         = 512
	DefaultMemoryBytes  = 1 << 30
	DefaultOpenFiles    = 4096
	DefaultCPUTime      = time.Hour
	wasmPage            = 64 << 10
	maxGuestMemoryBytes = 4<<30 - wasmPage
)

// Default returns the configuration used when no file is given: bundled
// capsules, the bwrap backend (isolated principals), default process
// ceilings, socket only, XDG state directory.
func Default() *Config {
	c := &Config{}
	c.applyDefaults()
	return c
}

func (c *Config) applyDefaults() {
	if c.Engine == "" {
		c.Engine = DefaultEngine
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir()
	}
	if c.WorkspaceRoot == "" {
		c.WorkspaceRoot = filepath.Join(c.StateDir, "workspaces")
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket(c.StateDir)
	}
	if c.Bundled == nil {
		t := true
		c.Bundled = &t
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = Duration(DefaultCallTimeout)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(DefaultShutdownGrace)
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Processes.Path == "" {
		c.Processes.Path = DefaultProcessPath
	}
	if c.Processes.OnShutdown == "" {
		c.Processes.OnShutdown = OnShutdownKeep
	}
	if c.Guests.MemoryBytes == 0 {
		c.Guests.MemoryBytes = DefaultGuestMemoryBytes
	}
	if c.Guests.CapsuleMemoryBytes == 0 {
		c.Guests.CapsuleMemoryBytes = DefaultCapsuleGuestMemoryBytes
	}
	if c.Guests.LogLinesPerSec == 0 {
		c.Guests.LogLinesPerSec = DefaultGuestLogLinesPerSec
	}
	if c.Guests.LogBurst == 0 {
		c.Guests.LogBurst = DefaultGuestLogBurst
	}
	c.applyIsolationDefaults()
	if c.Backends.OCI.Root == "" {
		c.Backends.OCI.Root = filepath.Join(c.StateDir, "oci")
	}
	for name, p := range c.Profiles {
		if p.Network == "" {
			p.Network = "none"
		}
		if p.Runtime == "" {
			p.Runtime = "runc"
		}
		if p.WorkspaceDir == "" {
			p.WorkspaceDir = "/workspace"
		}
		c.Profiles[name] = p
	}
}

// applyIsolationDefaults: the isolating bwrap backend (what the bundled
// shell capsule asks for), its unprivileged ids, and the process
// ceilings. A [limits] field left at 0 gets its default.
func (c *Config) applyIsolationDefaults() {
	if len(c.Backends.Enabled) == 0 {
		c.Backends.Enabled = []string{"bwrap"}
	}
	if c.Backends.Bwrap.UID == 0 {
		c.Backends.Bwrap.UID = DefaultSandboxID
	}
	if c.Backends.Bwrap.GID == 0 {
		c.Backends.Bwrap.GID = DefaultSandboxID
	}
	l := &c.Limits
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	if l.CPUTime == 0 {
		l.CPUTime = Duration(DefaultCPUTime)
	}
}

// DefaultStateDir is $XDG_STATE_HOME/capsule-host, else
// ~/.local/state/capsule-host; for root without XDG_STATE_HOME it is
// /var/lib/capsule-host (the FHS place for a system daemon's state).
func DefaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "capsule-host")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/capsule-host"
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "capsule-host")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("capsule-host-%d", os.Geteuid()))
}

// DefaultSocket is $XDG_RUNTIME_DIR/capsule-host/capsule-host.sock, else
// <stateDir>/capsule-host.sock.
func DefaultSocket(stateDir string) string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "capsule-host", "capsule-host.sock")
	}
	return filepath.Join(stateDir, "capsule-host.sock")
}

// DefaultPath is where the config is looked for when none is named:
// $XDG_CONFIG_HOME/capsule-host/capsule-host.toml (or ~/.config/...).
func DefaultPath() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "capsule-host", "capsule-host.toml")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".config", "capsule-host", "capsule-host.toml")
	}
	return ""
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Parse(path, b)
}

// Error is one problem at a place in the file.
type Error struct {
	File string
	Line int // 0: unknown
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		fmt.Fprintf(&b, "%s: ", e.Key)
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalid }

// The config's patterns are compiled on first use, not in package init:
// every CLI command links this package (the client resolves its socket
// here), and compiling them at start-up cost the lean client 1.2-3 ms
// (GODEBUG=inittrace=1), a third of a whole tmux client run.
var (
	hexSHA256 = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })
	// principalName mirrors the registry's rule loosely; the registry has
	// the last word when a call runs.
	principalName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}$`) })
	profileName   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`) })
)

// Parse decodes and validates data read from file (for messages and for
// resolving relative paths, made absolute against the file's directory).
// The first problem found is the one reported (see check.go).
func Parse(file string, data []byte) (*Config, error) {
	c := &Config{}
	// Strict: a key Config has no field for is an error, not ignored.
	lines, prob := stricttoml.Decode(string(data), c)
	if prob != nil {
		return nil, &Error{File: file, Line: prob.Line, Key: prob.Key, Msg: prob.Msg}
	}
	c.Path = file
	base := filepath.Dir(file)
	if abs, err := filepath.Abs(base); err == nil {
		base = abs
	}
	ck := &checker{file: file, lines: lines, base: base}
	for _, step := range []func(*Config) error{ck.top, ck.principals, ck.limits, ck.guests, ck.backends, ck.profiles} {
		if err := step(c); err != nil {
			return nil, err
		}
	}
	c.applyDefaults()
	return c, nil
}

// ProfileNames returns the launch profile names, sorted.
func (c *Config) ProfileNames() []string {
	out := make([]string, 0, len(c.Profiles))
	for n := range c.Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// PrincipalForTokenHash returns the principal whose token hash is h.
func (c *Config) PrincipalForTokenHash(h [32]byte) (string, bool) {
	want := hex.EncodeToString(h[:])
	for n, p := range c.Principals {
		for _, t := range p.TokenSHA256 {
			if t == want {
				return n, true
			}
		}
	}
	return "", false
}

func checkLoopback(addr string) error {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return err
	}
	if port == "" {
		return fmt.Errorf("%q has no port", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number in [0, 65535]", addr, port)
	}
	// An IP literal, never a host name that looks like one ("127.x.example"
	// resolves wherever its owner likes); "localhost" is the one name.
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address: the TCP listener only binds 127.0.0.0/8, ::1 or localhost", addr)
}

func splitHostPort(addr string) (host, port string, err error) {
	if strings.HasPrefix(addr, "[") {
		end := strings.Index(addr, "]")
		if end < 0 || !strings.HasPrefix(addr[end+1:], ":") {
			return "", "", fmt.Errorf("%q is not host:port", addr)
		}
		return addr[1:end], addr[end+2:], nil
	}
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return "", "", fmt.Errorf("%q is not host:port", addr)
	}
	return addr[:i], addr[i+1:], nil
}

// SetStateDir moves the state directory (a command-line override) and the
// paths that were derived from it by default; paths set explicitly in the
// file stay.
func (c *Config) SetStateDir(dir string) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	old := c.StateDir
	c.StateDir = dir
	if c.WorkspaceRoot == filepath.Join(old, "workspaces") {
		c.WorkspaceRoot = filepath.Join(dir, "workspaces")
	}
	if c.Socket == DefaultSocket(old) {
		c.Socket = DefaultSocket(dir)
	}
	if c.Backends.OCI.Root == filepath.Join(old, "oci") {
		c.Backends.OCI.Root = filepath.Join(dir, "oci")
	}
}

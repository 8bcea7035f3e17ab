// Package host runs capsules: it loads a capsule (manifest, pinned
// module, import validation), keeps a pool of warm instances per capsule,
// and runs each tool call on one of them with a per-call context carrying
// the principal, the capsule, a deadline and cancellation.
//
// Design notes ("Why …?") are in RFC.md §4.
package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
)

// Config configures a Host. Zero values take the documented defaults.
type Config struct {
	// Engine names the wasm engine: "wazero" (default) or an engine
	// compiled in with a build tag ("wasmtime": go build -tags wasmtime).
	Engine string
	// Registry is the host's process registry (required).
	Registry *registry.Registry
	// StateDir holds the compilation cache and, by default, workspaces
	// (required, absolute).
	StateDir string
	// WorkspaceRoot holds one workspace directory per capsule (default
	// StateDir/workspaces).
	WorkspaceRoot string
	Logger        *slog.Logger
	// CallTimeout bounds one tool call (default 30s); a caller's earlier
	// deadline wins.
	CallTimeout time.Duration
	// InstantiateTimeout bounds one instantiation (start function and
	// _initialize, at load, on a call or by the warmer) and the describe
	// call at load. Default: the
	// larger of CallTimeout and 10s — instantiation is host work, not the
	// caller's, and a short call timeout must not leave a loaded host
	// unable to create instances (the Go runtime's _initialize takes
	// hundreds of milliseconds under -race on a busy machine).
	InstantiateTimeout time.Duration
	// HostQuotas are the ceilings a manifest's [limits] may only lower
	// (zero fields: the registry defaults 8/32/256).
	HostQuotas registry.Quotas
	// HostLimits are the ceilings for per-process resource limits (zero
	// fields: no ceiling).
	HostLimits sandbox.Limits
	// Backends lists the execution backends available (default "local").
	Backends []string
	// Profiles lists launch profiles known by name only (a host that
	// validates manifests and runs nothing); see Policies.
	Profiles []string
	// Policies describe the backends as data, by name: whether commands
	// run inside a launch profile's root, and the profiles in full. A
	// manifest is checked against its backend's profile at load
	// (sandbox.CheckProfile), its exec entries are resolved in the
	// profile's exec root, and its workspaces are given to the profile's
	// owner. Default: the registry's (registry.Config.Policies), so the
	// host checks exactly what the registry and the backends enforce.
	Policies map[string]sandbox.BackendPolicy
	// AllowNetwork lets manifests ask for network access.
	AllowNetwork bool
	// OwnerPrincipal names a capsule's owner-fallback principal, used for
	// calls that carry none (default "owner:<capsule>").
	OwnerPrincipal func(capsule string) string
	// CacheDir holds compiled modules across runs (default
	// StateDir/cache/<engine>).
	CacheDir string
	// GuestMemoryBytes caps each instance's linear memory (default
	// DefaultGuestMemoryBytes; a multiple of the 64 KiB wasm page, at most
	// MaxGuestMemoryBytes). A manifest's pool.memory_bytes may only lower
	// it. A memory.grow past the limit fails (-1 to the guest); a guest
	// that then traps gets a *TrapError matching ErrMemoryLimit.
	GuestMemoryBytes int64
	// CapsuleGuestMemoryBytes bounds one capsule's whole pool: pool.max
	// times its per-instance limit may not exceed it, or the manifest is
	// refused at load (default DefaultCapsuleGuestMemoryBytes).
	CapsuleGuestMemoryBytes int64
	// GuestLogLinesPerSec and GuestLogBurst rate-limit the lines a
	// capsule's guests write to stdout and stderr, which go to the
	// daemon's log, per capsule across its pool (defaults
	// DefaultGuestLogLinesPerSec, DefaultGuestLogBurst). Lines over the
	// rate are dropped and the count logged.
	GuestLogLinesPerSec, GuestLogBurst int
}

// Defaults.
const (
	DefaultCallTimeout = 30 * time.Second
	// maxModuleBytes bounds a module read from disk.
	maxModuleBytes = 256 << 20
	// resetTimeout bounds dropping an instance's handles after a call.
	resetTimeout = 10 * time.Second

	// DefaultGuestMemoryBytes is the default linear memory ceiling of one
	// instance: ample for a Go guest (a few MB), far below the 4 GiB a
	// wasm32 memory may otherwise grow to.
	DefaultGuestMemoryBytes = 256 << 20
	// DefaultCapsuleGuestMemoryBytes is the default ceiling of a pool:
	// the default pool.max (8) instances at the default limit.
	DefaultCapsuleGuestMemoryBytes = 2 << 30
	// MaxGuestMemoryBytes is the largest per-instance limit: 65535 pages
	// (the seam reports a memory's size in 32 bits, so 4 GiB itself would
	// read as 0).
	MaxGuestMemoryBytes = 4<<30 - wasmPage
	wasmPage            = 64 << 10
)

// EngineCtor builds an engine; each engine package has one (New).
type EngineCtor func(ctx context.Context, cfg engine.EngineConfig, funcs []engine.HostFunc) (engine.Engine, error)

var (
	enginesMu sync.Mutex
	engines   = map[string]EngineCtor{}
)

// buildHint tells how to build with an engine that is not compiled in.
var buildHint = map[string]string{"wasmtime": "go build -tags wasmtime"}

// CacheEnv names a compile cache directory shared across hosts: test
// runs, validate and sdktest point at one directory so a module is
// compiled once per run, not once per host (the engine's cache guard
// locks and checks entries).
const CacheEnv = "CAPSULE_HOST_CACHE_DIR"

// EnvCacheDir is engine's subdirectory of $CAPSULE_HOST_CACHE_DIR (the
// default engine for ""), or "" when it is unset, which leaves a host
// its private StateDir/cache.
func EnvCacheDir(engine string) string {
	dir := os.Getenv(CacheEnv)
	if dir == "" {
		return ""
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if engine == "" {
		engine = "wazero"
	}
	return filepath.Join(dir, engine)
}

// RegisterEngine makes an engine selectable by name. wazero registers
// itself; wasmtime does from a file built only with -tags wasmtime.
func RegisterEngine(name string, ctor EngineCtor) {
	enginesMu.Lock()
	defer enginesMu.Unlock()
	engines[name] = ctor
}

// Engines lists the engines compiled into this binary, sorted.
func Engines() []string {
	enginesMu.Lock()
	defer enginesMu.Unlock()
	out := make([]string, 0, len(engines))
	for n := range engines {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func lookupEngine(name string) (EngineCtor, error) {
	enginesMu.Lock()
	ctor, ok := engines[name]
	enginesMu.Unlock()
	if ok {
		return ctor, nil
	}
	if hint, ok := buildHint[name]; ok {
		return nil, fmt.Errorf("%w: engine %q is not compiled into this binary; build with `%s` (compiled in: %v)", ErrEngine, name, hint, Engines())
	}
	return nil, fmt.Errorf("%w: unknown engine %q (compiled in: %v)", ErrEngine, name, Engines())
}

// Host runs capsules. All methods are safe for concurrent use.
type Host struct {
	cfg    Config
	log    *slog.Logger
	reg    *registry.Registry
	eng    engine.Engine
	served *served
	funcs  []engine.HostFunc // the engine's, also lowered into components

	nextInstance atomic.Uint64

	loadMu   sync.Mutex // serialises Load/Remove/Close
	mu       sync.RWMutex
	capsules map[string]*Capsule
	// retired are pools closed by a reload or Remove that may still be
	// draining (a busy call, a warmer mid-instantiation): Close waits for
	// them too before it closes the engine under them.
	retired []*pool
	closed  bool
}

// New creates a Host and its engine.
func New(ctx context.Context, cfg Config) (*Host, error) {
	if cfg.Registry == nil {
		return nil, errors.New("host: Config.Registry is required")
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("host: Config.StateDir %q must be an absolute path", cfg.StateDir)
	}
	if cfg.Engine == "" {
		cfg.Engine = "wazero"
	}
	if cfg.WorkspaceRoot == "" {
		cfg.WorkspaceRoot = filepath.Join(cfg.StateDir, "workspaces")
	}
	if !filepath.IsAbs(cfg.WorkspaceRoot) {
		return nil, fmt.Errorf("host: Config.WorkspaceRoot %q must be an absolute path", cfg.WorkspaceRoot)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.InstantiateTimeout <= 0 {
		cfg.InstantiateTimeout = max(cfg.CallTimeout, minInstantiateTimeout)
	}
	if len(cfg.Backends) == 0 {
		cfg.Backends = []string{"local"}
	}
	if cfg.Policies == nil {
		cfg.Policies = cfg.Registry.Policies()
	}
	if cfg.OwnerPrincipal == nil {
		cfg.OwnerPrincipal = func(c string) string { return "owner:" + c }
	}
	q := &cfg.HostQuotas
	if q.MaxConcurrent <= 0 {
		q.MaxConcurrent = 8
	}
	if q.MaxRetained <= 0 {
		q.MaxRetained = 32
	}
	if q.MaxEntries <= 0 {
		q.MaxEntries = 256
	}
	if err := guestMemoryDefaults(&cfg); err != nil {
		return nil, err
	}
	ctor, err := lookupEngine(cfg.Engine)
	if err != nil {
		return nil, err
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.StateDir, "cache", cfg.Engine)
	}
	cacheDir := cfg.CacheDir
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("host: module cache: %w", err)
	}
	funcs := hostFuncs(cfg.Registry)
	eng, err := ctor(ctx, engine.EngineConfig{CacheDir: cacheDir, MemoryLimitPages: uint32(cfg.GuestMemoryBytes / wasmPage)}, funcs)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrEngine, cfg.Engine, err)
	}
	return &Host{
		cfg:      cfg,
		log:      cfg.Logger,
		reg:      cfg.Registry,
		eng:      eng,
		served:   newServed(funcs, servedModules()),
		funcs:    funcs,
		capsules: map[string]*Capsule{},
	}, nil
}

// guestMemoryDefaults fills and checks the guest memory ceilings.
func guestMemoryDefaults(cfg *Config) error {
	if cfg.GuestMemoryBytes == 0 {
		cfg.GuestMemoryBytes = DefaultGuestMemoryBytes
	}
	if cfg.CapsuleGuestMemoryBytes == 0 {
		cfg.CapsuleGuestMemoryBytes = DefaultCapsuleGuestMemoryBytes
	}
	if g := cfg.GuestMemoryBytes; g < wasmPage || g > MaxGuestMemoryBytes || g%wasmPage != 0 {
		return fmt.Errorf("host: Config.GuestMemoryBytes %d is not a multiple of %d in [%d, %d]", g, wasmPage, wasmPage, MaxGuestMemoryBytes)
	}
	if cfg.CapsuleGuestMemoryBytes < cfg.GuestMemoryBytes {
		return fmt.Errorf("host: Config.CapsuleGuestMemoryBytes %d is below GuestMemoryBytes %d: no pool could hold one instance", cfg.CapsuleGuestMemoryBytes, cfg.GuestMemoryBytes)
	}
	if cfg.GuestLogLinesPerSec == 0 {
		cfg.GuestLogLinesPerSec = DefaultGuestLogLinesPerSec
	}
	if cfg.GuestLogBurst == 0 {
		cfg.GuestLogBurst = DefaultGuestLogBurst
	}
	if cfg.GuestLogLinesPerSec < 0 || cfg.GuestLogBurst < 1 {
		return fmt.Errorf("host: Config.GuestLogLinesPerSec %d and GuestLogBurst %d must be positive", cfg.GuestLogLinesPerSec, cfg.GuestLogBurst)
	}
	return nil
}

// EngineName is the engine this host runs.
func (h *Host) EngineName() string { return h.eng.Name() }

// Served lists the WIT import modules this host serves.
func (h *Host) Served() []string { return slices.Clone(h.served.modules) }

// Capsule is a loaded capsule.
type Capsule struct {
	Manifest *manifest.Manifest
	// SHA256 of the module, hex.
	SHA256 string
	tools  []ToolSpec
	// schemas are the tools' compiled input schemas (absent: none
	// declared), compiled once at load.
	schemas map[string]*jsonschema.Schema
	pool    *pool
	mod     engine.Module
	policy  registry.CapsulePolicy
	loaded  time.Time
	// memLimit is each instance's linear memory limit, bytes.
	memLimit int64
}

// Name is the capsule's name.
func (c *Capsule) Name() string { return c.Manifest.Name }

// Tools are the tools the capsule described at load.
func (c *Capsule) Tools() []ToolSpec { return slices.Clone(c.tools) }

// Policy is what the registry enforces for the capsule.
func (c *Capsule) Policy() registry.CapsulePolicy { return c.policy }

// PoolStats is a snapshot of a capsule's pool.
type PoolStats struct {
	Idle, Busy, Live int
	// Created and Discarded count instances over the pool's life.
	Created, Discarded, Evicted uint64
}

// Stats snapshots the capsule's pool.
func (c *Capsule) Stats() PoolStats { return c.pool.stats() }

func (c *Capsule) tool(name string) bool {
	for _, t := range c.tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// Load loads (or reloads) the capsule in dir. A reload under the same
// name swaps the module and pool and keeps the capsule's processes; if the
// new version fails to load, the old one keeps serving.
func (h *Host) Load(ctx context.Context, dir string) (*Capsule, error) {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	if h.isClosed() {
		return nil, ErrClosed
	}
	m, err := manifest.Load(dir)
	if err != nil {
		return nil, err
	}
	policy, err := h.policy(m)
	if err != nil {
		return nil, err
	}
	wasm, sum, err := readModule(m)
	if err != nil {
		return nil, err
	}
	mod, err := h.compile(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("capsule %q: %s: %w", m.Name, m.Module, err)
	}
	c := &Capsule{Manifest: m, SHA256: sum, mod: mod, policy: policy, loaded: time.Now(), memLimit: h.guestMemory(m)}
	fail := func(err error) (*Capsule, error) {
		_ = mod.Close(ctx)
		return nil, err
	}
	if err := h.served.validateImports(m, mod.Imports()); err != nil {
		return fail(err)
	}
	if err := validateExports(m.Name, mod.Exports()); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(policy.Workspace, 0o700); err != nil {
		return fail(fmt.Errorf("%w: capsule %q: workspace: %w", ErrPolicy, m.Name, err))
	}
	h.mu.RLock()
	old := h.capsules[m.Name]
	h.mu.RUnlock()
	if err := h.reg.RegisterCapsule(m.Name, policy); err != nil {
		return fail(fmt.Errorf("%w: capsule %q: registry: %w", ErrPolicy, m.Name, err))
	}
	// From here a failure must restore the registry's previous state.
	undo := func() {
		if old != nil {
			_ = h.reg.RegisterCapsule(m.Name, old.policy)
		} else {
			_ = h.reg.RemoveCapsule(context.WithoutCancel(ctx), m.Name)
		}
	}
	c.pool = newPool(h, c)
	tools, err := h.describe(ctx, c)
	if err != nil {
		c.pool.close()
		undo()
		return nil, err
	}
	c.tools = tools
	c.pool.start()
	h.mu.Lock()
	h.capsules[m.Name] = c
	h.mu.Unlock()
	if old != nil {
		h.retire(old.pool) // busy instances finish their call, then close
		h.log.Info("capsule reloaded", "capsule", m.Name, "version", m.Version, "previous", old.Manifest.Version, "tools", len(tools))
	} else {
		h.log.Info("capsule loaded", "capsule", m.Name, "version", m.Version, "tools", len(tools))
	}
	return c, nil
}

// compile compiles a core module, or a component (on the engine seam,
// its imports lowered onto the host functions and WASI 0.2): what Load
// pools is an engine.Module either way. A component is refused with a
// *component.Error naming what is unsupported or mismatched, never the
// engine's "invalid version header".
func (h *Host) compile(ctx context.Context, wasm []byte) (engine.Module, error) {
	if k, _ := component.Detect(wasm); k != component.KindComponent {
		if err := component.CheckCore(wasm, servedModules()); err != nil {
			return nil, err
		}
		return h.eng.Compile(ctx, wasm)
	}
	c, err := component.Parse(wasm)
	if err != nil {
		return nil, err
	}
	return component.Compile(ctx, h.eng, c, h.componentFuncs, witSignatures())
}

func readModule(m *manifest.Manifest) ([]byte, string, error) {
	p, err := m.ModulePath()
	if err != nil {
		return nil, "", err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, "", fmt.Errorf("capsule %q: module: %w", m.Name, err)
	}
	defer f.Close()
	wasm, err := io.ReadAll(io.LimitReader(f, maxModuleBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("capsule %q: module: %w", m.Name, err)
	}
	if len(wasm) > maxModuleBytes {
		return nil, "", fmt.Errorf("capsule %q: module %s is larger than %d bytes", m.Name, m.Module, maxModuleBytes)
	}
	s := sha256.Sum256(wasm)
	sum := hex.EncodeToString(s[:])
	if sum != m.SHA256 {
		return nil, "", fmt.Errorf("%w: capsule %q: %w", ErrChecksum, m.Name,
			m.Errorf("capsule.sha256", "module %s has sha256 %s, the manifest pins %s", m.Module, sum, m.SHA256))
	}
	return wasm, sum, nil
}

// describe runs describe once on a fresh instance (which then seeds the
// pool), checks the tool names and compiles their input schemas into
// c.schemas.
func (h *Host) describe(ctx context.Context, c *Capsule) ([]ToolSpec, error) {
	in, err := c.pool.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: capsule %q: %w", ErrInstance, c.Name(), err)
	}
	// Bounded like an instantiation, not a call: describing a capsule at
	// load is host work, and a short call_timeout must not make a reload
	// fail on a busy machine (TestHammer reloaded with a 50 ms call
	// timeout at load 23 under -race, and describe missed it).
	dctx, cancel := context.WithTimeout(ctx, h.cfg.InstantiateTimeout)
	defer cancel()
	dctx = h.callContext(dctx, in, registry.Caller{Capsule: c.Name(), Principal: h.cfg.OwnerPrincipal(c.Name()), Fallback: true})
	tools, err := describeTools(dctx, in.ei)
	if err != nil {
		c.pool.put(ctx, in, true)
		return nil, fmt.Errorf("%w: capsule %q: %w", ErrDescribe, c.Name(), err)
	}
	seen := map[string]bool{}
	for _, t := range tools {
		if !toolNameOK(t.Name) {
			c.pool.put(ctx, in, true)
			return nil, fmt.Errorf("%w: capsule %q: tool name %q is not [a-z0-9_]{1,64}", ErrDescribe, c.Name(), t.Name)
		}
		if seen[t.Name] {
			c.pool.put(ctx, in, true)
			return nil, fmt.Errorf("%w: capsule %q: tool %q described twice", ErrDescribe, c.Name(), t.Name)
		}
		seen[t.Name] = true
	}
	schemas, err := compileSchemas(c.Name(), tools)
	c.pool.put(ctx, in, false)
	if err != nil {
		return nil, err
	}
	c.schemas = schemas
	return tools, nil
}

func toolNameOK(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Remove unloads a capsule and stops all its processes.
func (h *Host) Remove(ctx context.Context, name string) error {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	h.mu.Lock()
	c, ok := h.capsules[name]
	delete(h.capsules, name)
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownCapsule, name)
	}
	h.retire(c.pool)
	if err := h.reg.RemoveCapsule(ctx, name); err != nil {
		return fmt.Errorf("capsule %q: registry: %w", name, err)
	}
	h.log.Info("capsule removed", "capsule", name)
	return nil
}

// Capsules lists the loaded capsules by name.
func (h *Host) Capsules() []*Capsule {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]*Capsule, 0, len(h.capsules))
	for _, c := range h.capsules {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Capsule returns a loaded capsule.
func (h *Host) Capsule(name string) (*Capsule, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	c, ok := h.capsules[name]
	return c, ok
}

func (h *Host) isClosed() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closed
}

// Close closes every pool and the engine. In-flight calls finish first
// (bounded by ctx). The registry is the caller's: shut it down after.
func (h *Host) Close(ctx context.Context) error {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	cs := h.capsules
	h.capsules = map[string]*Capsule{}
	h.mu.Unlock()
	h.mu.Lock()
	retired := h.retired
	h.retired = nil
	h.mu.Unlock()
	for _, c := range cs {
		c.pool.close()
	}
	for _, c := range cs {
		c.pool.wait(ctx)
	}
	for _, p := range retired {
		p.wait(ctx)
	}
	return h.eng.Close(ctx)
}

// retire closes a pool that leaves the host (reload, Remove) and keeps
// it until it has drained, so that Close waits for it; drained ones are
// dropped here, so the list stays as long as what is still draining.
func (h *Host) retire(p *pool) {
	p.close()
	h.mu.Lock()
	defer h.mu.Unlock()
	live := h.retired[:0]
	for _, r := range h.retired {
		select {
		case <-r.drained:
		default:
			live = append(live, r)
		}
	}
	h.retired = append(live, p)
}

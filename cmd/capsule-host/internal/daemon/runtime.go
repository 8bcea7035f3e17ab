// Package daemon is the capsule-host daemon: it builds the host, the
// registry and the backends from the host config, and answers the HTTP/JSON
// API (package api) on a unix socket and, optionally, loopback TCP.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
)

// Options are what the command line adds to the config.
type Options struct {
	// Engine overrides the config's engine ("" : keep).
	Engine string
	// Bundled is the capsules compiled into the binary (nil: none).
	Bundled fs.FS
	// Version is the binary's version, reported by health.
	Version string
	Log     *slog.Logger
	// SalvageJournal starts on a damaged journal: the file is kept aside
	// and every record that can be read is kept (serve --salvage-journal).
	SalvageJournal bool
	// Reconfig re-reads the host config for a reload (its capsules and
	// bundled settings are used); nil: reload re-reads the directories of
	// the config Open was given.
	Reconfig func() (*config.Config, error)
	// Hangup delivers SIGHUP (the caller notifies it before Open, so a
	// hang-up during start is neither fatal nor lost); Serve reloads on
	// each. nil: no signal reload.
	Hangup <-chan os.Signal
	// Watch, when positive, is the poll interval of serve --watch: Serve
	// reloads a capsule whose directory's manifest or module changed
	// (watch.go). 0: no watching.
	Watch time.Duration
	// Progress receives the start's progress and each capsule's state
	// (health); give the same one to ServeLoading. nil: Open makes one.
	Progress *Progress
}

// Runtime is one host with its registry and backends.
type Runtime struct {
	Config   *config.Config
	Host     *host.Host
	Registry *registry.Registry
	Engine   string
	Version  string
	Log      *slog.Logger
	Started  time.Time
	// Adopted is what the start took back from an earlier daemon.
	Adopted registry.AdoptReport

	durable *durable
	cluster *cluster // nil outside cluster mode (cluster.go)

	caps *capsuleSet // capsules.go
	// Progress is the readiness and each capsule's state (health).
	Progress *Progress

	reloadMu  sync.Mutex
	onReloads []func() // OnReload
}

// OnReload registers f to run after every reload (reload, SIGHUP, watch)
// has been applied: the MCP endpoint re-syncs its sessions' tool lists,
// so clients get notifications/tools/list_changed without asking.
func (rt *Runtime) OnReload(f func()) {
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	rt.onReloads = append(rt.onReloads, f)
}

func (rt *Runtime) reloaded() {
	rt.reloadMu.Lock()
	fs := append([]func(){}, rt.onReloads...)
	rt.reloadMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Open builds the runtime and loads every capsule: the bundled ones (when
// enabled), then the config's directories, which may replace a bundled
// capsule of the same name. A capsule that fails to load is reported (log,
// `capsules`) and the others are served; Open fails only when every
// configured capsule fails (loadCapsules).
func Open(ctx context.Context, cfg *config.Config, o Options) (rt *Runtime, err error) {
	lg := o.Log
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	phases := newPhases()
	engine, err := prepare(cfg, o)
	if err != nil {
		return nil, err
	}
	set, err := buildBackends(ctx, cfg, lg)
	if err != nil {
		return nil, err
	}
	phases.mark("backends")
	dur, err := openDurable(cfg, o.SalvageJournal, lg)
	if err != nil {
		return nil, err
	}
	phases.mark("journal")
	defer func() {
		if err != nil {
			dur.keep = true // a failed start ends nothing it did not start
			dur.close(context.WithoutCancel(ctx))
		}
	}()
	persistent, err := dur.persistentBackends(cfg, set)
	if err != nil {
		return nil, err
	}
	cl, err := openCluster(ctx, cfg, o.Version, lg)
	if err != nil {
		return nil, err
	}
	defer cl.closeIfFailed(ctx, &err)
	reg, err := openRegistry(cfg, set, func(rc *registry.Config) {
		rc.Persistent, rc.Journal, rc.Keys = persistent, dur.jr, &dur.keys
		cl.configure(rc)
	}, lg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = reg.Detach(sctx) // a failed start ends no process an earlier daemon left
		}
	}()
	adopt := startAdopt(ctx, reg)
	defer adopt.abandonUnlessTaken()
	h, err := openHost(ctx, cfg, engine, reg, set.names(), lg)
	if err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = &Progress{}
	}
	rt = &Runtime{Config: cfg, Host: h, Registry: reg, Engine: engine, Version: o.Version, Log: lg, Started: time.Now(), durable: dur, cluster: cl, Progress: o.Progress}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = h.Close(sctx)
		}
	}()
	phases.mark("host")
	if err := rt.loadCapsules(ctx, o); err != nil {
		return nil, err
	}
	phases.mark("capsules")
	if rt.Adopted, err = adopt.take().Finish(ctx); err != nil {
		return nil, err
	}
	phases.mark("adopt")
	cl.serve(reg)
	rt.Progress.setReady()
	phases.log(lg)
	return rt, nil
}

// pendingAdopt is a PrepareAdopt running while the capsules compile
// (the two slow parts of a restart): nothing is published, and no call
// served, before its Finish (RFC §16, Adopt). Open is ready only after
// Finish: every journaled process is back (or known lost), and nothing
// runs that no record owns.
type pendingAdopt struct {
	ch    chan *registry.Adoption
	taken bool
}

func startAdopt(ctx context.Context, reg *registry.Registry) *pendingAdopt {
	p := &pendingAdopt{ch: make(chan *registry.Adoption, 1)}
	go func() { p.ch <- reg.PrepareAdopt(ctx) }()
	return p
}

// take waits for PrepareAdopt to end.
func (p *pendingAdopt) take() *registry.Adoption {
	p.taken = true
	return <-p.ch
}

// abandonUnlessTaken releases the attaches of a start that failed first.
func (p *pendingAdopt) abandonUnlessTaken() {
	if !p.taken {
		p.take().Abandon()
	}
}

// prepare picks the engine (the option over the config), checks it is
// compiled in, and creates the state and workspace directories.
func prepare(cfg *config.Config, o Options) (string, error) {
	engine := cfg.Engine
	if o.Engine != "" {
		engine = o.Engine
	}
	if err := CheckEngine(engine); err != nil {
		return "", err
	}
	for _, d := range []string{cfg.StateDir, cfg.WorkspaceRoot} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", fmt.Errorf("creating %s: %w", d, err)
		}
	}
	return engine, nil
}

// registryConfig is the registry's part of the host config: the backends
// and their policy data, the host's environment (the registry reads none
// itself) with the configured PATH, quotas and process defaults.
func registryConfig(cfg *config.Config, set backendSet, lg *slog.Logger) registry.Config {
	return registry.Config{
		Backends: set.backends,
		Policies: set.policies,
		HostEnv:  hostEnv(os.Environ(), cfg.Processes.Path),
		StateDir: filepath.Join(cfg.StateDir, "processes"),
		Quotas:   quotas(cfg),
		Defaults: registry.Defaults{
			LogRingBytes:  cfg.Processes.LogRingBytes,
			SpillBytes:    cfg.Processes.SpillBytes,
			OutputRate:    sandbox.OutputRate{BytesPerSec: cfg.Processes.OutputRateBytes, Burst: cfg.Processes.OutputBurstBytes},
			MaxLifetime:   cfg.Processes.MaxLifetime.D(),
			IdleTimeout:   cfg.Processes.IdleTimeout.D(),
			ExitRetention: cfg.Processes.ExitRetention.D(),
			WaitCap:       cfg.Processes.WaitCap.D(),
			StopGrace:     cfg.Processes.StopGrace.D(),
			StopGraceCap:  cfg.Processes.StopGraceCap.D(),
		},
		Logger: lg.With("component", "registry"),
	}
}

// hostEnv is environ with PATH replaced by path (processes.path): what a
// bare command runs, in the exec check and inside the process, is the
// operator's configured choice, not whatever PATH the daemon started with.
func hostEnv(environ []string, path string) []string {
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	if path == "" {
		path = config.DefaultProcessPath
	}
	return append(out, "PATH="+path)
}

// quotas are the host's per-capsule quotas (the registry's, and the
// ceilings a manifest may only lower).
func quotas(cfg *config.Config) registry.Quotas {
	return registry.Quotas{
		MaxConcurrent: cfg.Quotas.MaxConcurrent,
		MaxRetained:   cfg.Quotas.MaxRetained,
		MaxEntries:    cfg.Quotas.MaxEntries,
	}
}

// openRegistry starts the process registry, and gives a redacting log
// handler the registry's keyed hash of process IDs.
func openRegistry(cfg *config.Config, set backendSet, mut func(*registry.Config), lg *slog.Logger) (*registry.Registry, error) {
	rcfg := registryConfig(cfg, set, lg)
	mut(&rcfg)
	if err := os.MkdirAll(rcfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", rcfg.StateDir, err)
	}
	reg, err := registry.New(rcfg)
	if err != nil {
		return nil, fmt.Errorf("starting the process registry: %w", err)
	}
	if rh, ok := lg.Handler().(*RedactHandler); ok {
		rh.SetHasher(reg.LogID)
	}
	return reg, nil
}

// openHost starts the host over reg. The backends' policy data comes from
// the registry (host.Config.Policies' default), so the host checks
// manifests against what the registry and the backends enforce.
func openHost(ctx context.Context, cfg *config.Config, engine string, reg *registry.Registry, backends []string, lg *slog.Logger) (*host.Host, error) {
	h, err := host.New(ctx, host.Config{
		Engine:        engine,
		Registry:      reg,
		StateDir:      cfg.StateDir,
		CacheDir:      cacheDir(cfg, engine),
		WorkspaceRoot: cfg.WorkspaceRoot,
		Logger:        lg.With("component", "host"),
		CallTimeout:   cfg.CallTimeout.D(),
		HostQuotas:    quotas(cfg),
		HostLimits: sandbox.Limits{
			MemoryBytes: cfg.Limits.MemoryBytes,
			CPUTime:     cfg.Limits.CPUTime.D(),
			Pids:        cfg.Limits.Pids,
			OpenFiles:   cfg.Limits.OpenFiles,
		},
		Backends:                backends,
		Profiles:                cfg.ProfileNames(),
		AllowNetwork:            cfg.AllowNetwork,
		GuestMemoryBytes:        cfg.Guests.MemoryBytes,
		CapsuleGuestMemoryBytes: cfg.Guests.CapsuleMemoryBytes,
		GuestLogLinesPerSec:     cfg.Guests.LogLinesPerSec,
		GuestLogBurst:           cfg.Guests.LogBurst,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the host: %w", err)
	}
	return h, nil
}

// CacheEnv names a compile cache directory that overrides the config's
// cache_dir: test runs point every daemon they start at one directory, so
// each bundled module is compiled once per run, not once per daemon.
const CacheEnv = host.CacheEnv

// cacheDir is the engine's compile cache: $CAPSULE_HOST_CACHE_DIR, else
// cache_dir, each with one subdirectory per engine; "" leaves the host's
// default (<state_dir>/cache/ENGINE).
func cacheDir(cfg *config.Config, engine string) string {
	if engine == "" {
		engine = config.DefaultEngine
	}
	if env := host.EnvCacheDir(engine); env != "" {
		return env
	}
	dir := cfg.CacheDir
	if dir == "" {
		return ""
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return filepath.Join(dir, engine)
}

// CheckEngine refuses an engine this binary was not built with, saying
// how to get it.
func CheckEngine(name string) error {
	for _, e := range host.Engines() {
		if e == name {
			return nil
		}
	}
	if name == "wasmtime" {
		return fmt.Errorf("engine %q is not compiled into this binary: build it with `CGO_ENABLED=1 go build -tags wasmtime ./cmd/capsule-host` (engines here: %v)", name, host.Engines())
	}
	return fmt.Errorf("unknown engine %q (engines compiled in: %v)", name, host.Engines())
}

// CapsuleViews lists the loaded capsules and their tools, sorted by name.
func (rt *Runtime) CapsuleViews() []api.Capsule {
	caps := rt.Host.Capsules()
	out := make([]api.Capsule, 0, len(caps))
	for _, c := range caps {
		v := api.Capsule{Name: c.Name(), Version: c.Manifest.Version, Tools: []api.Tool{}}
		for _, t := range c.Tools() {
			tv := api.Tool{Name: t.Name, Description: t.Description}
			if t.InputSchema != "" {
				if json.Valid([]byte(t.InputSchema)) {
					tv.InputSchema = json.RawMessage(t.InputSchema)
				} else {
					b, _ := json.Marshal(t.InputSchema)
					tv.InputSchema = b
				}
			}
			v.Tools = append(v.Tools, tv)
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close ends the runtime: the host first (no more calls; instance-owned
// ephemeral processes are reaped), then the registry under the shutdown
// policy ([processes] on_shutdown): "keep" leaves every persistent
// process that can outlive the daemon running, journaled, for the next
// one; "stop" stops them all. Each one is logged either way.
func (rt *Runtime) Close(ctx context.Context) error {
	keep := rt.durable.keep
	live := rt.Registry.OperatorList(registry.OperatorFilter{Brief: true})
	n := 0
	verb := "stopping persistent process for shutdown"
	if keep {
		verb = "keeping persistent process for the next daemon"
	}
	for _, in := range live {
		if in.Phase == registry.PhaseExited {
			continue
		}
		n++
		rt.Log.Info(verb, "capsule", in.Capsule, "principal", in.Principal, "proc", rt.Registry.LogID(in.ID), "label", in.Label)
	}
	rt.Log.Info("shutting down", "on_shutdown", rt.Config.Processes.OnShutdown, "running", n, "retained", len(live))
	var errs []error
	rt.cluster.stopPeers(ctx)
	if err := rt.Host.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("closing the host: %w", err))
	}
	shut := rt.Registry.Shutdown
	if keep {
		shut = rt.Registry.Detach
	}
	if err := shut(ctx); err != nil {
		errs = append(errs, fmt.Errorf("closing the registry: %w", err))
		rt.Log.Error("closing the registry failed", "err", err)
	} else if keep {
		rt.Log.Info("persistent processes kept running for the next daemon", "kept", n)
	} else {
		rt.Log.Info("persistent processes stopped", "stopped", n)
	}
	if err := rt.cluster.close(ctx, keep); err != nil {
		errs = append(errs, fmt.Errorf("leaving the cluster: %w", err))
	}
	if err := rt.durable.close(ctx); err != nil {
		errs = append(errs, err)
		rt.Log.Error("closing the keepers, journal or lock failed", "err", err)
	}
	return errors.Join(errs...)
}

// phases times Open's steps for one start log line ("started", each
// step's duration since the one before): where a restart's second goes.
type phases struct {
	t0, last time.Time
	attrs    []any
}

func newPhases() *phases { now := time.Now(); return &phases{t0: now, last: now} }

func (p *phases) mark(name string) {
	now := time.Now()
	p.attrs = append(p.attrs, name, now.Sub(p.last).Round(time.Microsecond))
	p.last = now
}

func (p *phases) log(lg *slog.Logger) {
	lg.Info("started", append(p.attrs, "took", time.Since(p.t0).Round(time.Microsecond))...)
}

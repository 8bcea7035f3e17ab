package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/bwrap"
	"github.com/capsule-host/capsule-host/sandbox/local"
	"github.com/capsule-host/capsule-host/sandbox/oci"
)

// backendSet is the constructed backends and, by the same names, their
// policy data (what the registry and the host decide from).
type backendSet struct {
	backends map[string]sandbox.Backend
	policies map[string]sandbox.BackendPolicy
}

// names are the backends' names, sorted.
func (s backendSet) names() []string {
	out := make([]string, 0, len(s.backends))
	for n := range s.backends {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// buildBackends constructs the backends enabled in the config. A backend
// that cannot start (bwrap missing, no OCI runtime) fails the daemon with
// the reason, rather than failing each capsule's calls later.
func buildBackends(ctx context.Context, cfg *config.Config, lg *slog.Logger) (backendSet, error) {
	out := backendSet{backends: map[string]sandbox.Backend{}, policies: map[string]sandbox.BackendPolicy{}}
	for _, name := range cfg.Backends.Enabled {
		b, pol, err := buildBackend(cfg, name)
		if err != nil {
			return backendSet{}, fmt.Errorf("backend %s: %w%s", name, err, backendHint(name, err))
		}
		if name == "local" {
			lg.Warn("backend local is enabled: its processes are NOT isolated from each other nor from the host; any principal's command can read every workspace, the state directory and the API socket (use it only for a single user; backend bwrap isolates)",
				"backend", name)
		}
		out.backends[name], out.policies[name] = b, pol
		lg.Debug("backend ready", "backend", name)
	}
	return out, nil
}

// buildBackend constructs one backend and describes it as policy data:
// local and bwrap run host commands and have no launch profiles; the oci
// backend describes its own profiles (oci.Backend.Policy), so the host
// checks manifests against exactly what it will enforce.
func buildBackend(cfg *config.Config, name string) (sandbox.Backend, sandbox.BackendPolicy, error) {
	switch name {
	case "local":
		b, err := local.New(local.Options{})
		return b, sandbox.BackendPolicy{}, err
	case "bwrap":
		b, err := newBwrap(cfg)
		return b, sandbox.BackendPolicy{}, err
	case "oci":
		b, err := newOCI(cfg)
		if err != nil {
			return nil, sandbox.BackendPolicy{}, err
		}
		return b, b.Policy(), nil
	}
	return nil, sandbox.BackendPolicy{}, fmt.Errorf("unknown backend %q", name)
}

// backendHint is the fix appended to a backend that cannot start: for
// bwrap (the default), how to install it or, knowingly, run without it.
func backendHint(name string, err error) string {
	if name != "bwrap" || !errors.Is(err, sandbox.ErrUnavailable) {
		return ""
	}
	return ` (bwrap isolates principals by default: install bubblewrap; or, for a single-user setup only, set backends.enabled = ["local"] and load a copy of the shell capsule whose capabilities.backend is "local")`
}

// newBwrap builds the default, isolating backend. Besides the state
// directory it hides the workspace root (so a principal sees only its own
// workspace, bound over the mask) and the API socket, wherever they are
// configured. As root, the programs run as the configured unprivileged
// ids: sandbox root would otherwise be host root.
func newBwrap(cfg *config.Config) (sandbox.Backend, error) {
	return bwrap.New(bwrapOptions(cfg))
}

// bwrapOptions are the bubblewrap backend's options from the config: the
// daemon's own backend and the persistent tier's keeper (which embeds
// bwrap) get the same ones, so a persistent process is sandboxed exactly
// as an ephemeral one (hidden workspace root and socket, the unprivileged
// sandbox user under a root daemon).
func bwrapOptions(cfg *config.Config) bwrap.Options {
	bw := cfg.Backends.Bwrap
	mask := append([]string{cfg.WorkspaceRoot, cfg.Socket}, bw.Mask...)
	opts := bwrap.Options{Path: bw.Path, StateDir: cfg.StateDir, Mask: mask}
	if os.Geteuid() == 0 {
		opts.User = &sandbox.Owner{UID: bw.UID, GID: bw.GID}
	}
	return opts
}

// newOCI passes the config's runtimes and launch profiles through to the
// OCI backend, which validates the profiles itself.
func newOCI(cfg *config.Config) (*oci.Backend, error) {
	opts, err := ociOptions(cfg)
	if err != nil {
		return nil, err
	}
	return oci.New(opts)
}

// ociOptions are the OCI backend's options from the config: the daemon's
// own (ephemeral) backend and the OCI keeper's embedded one get the same.
func ociOptions(cfg *config.Config) (oci.Options, error) {
	if err := os.MkdirAll(cfg.Backends.OCI.Root, 0o700); err != nil {
		return oci.Options{}, err
	}
	rts := map[string]string{}
	for n, p := range cfg.Backends.OCI.Runtimes {
		if !filepath.IsAbs(p) {
			lp, err := exec.LookPath(p)
			if err != nil {
				return oci.Options{}, fmt.Errorf("runtime %q: %q not found in PATH", n, p)
			}
			if lp, err = filepath.Abs(lp); err == nil {
				p = lp
			}
		}
		rts[n] = p
	}
	profiles := map[string]oci.Profile{}
	for n, p := range cfg.Profiles {
		op := oci.Profile{
			Runtime:       p.Runtime,
			Rootfs:        p.Rootfs,
			WorkspaceDir:  p.WorkspaceDir,
			Network:       oci.NetworkMode(p.Network),
			UID:           p.UID,
			GID:           p.GID,
			Capabilities:  p.Capabilities,
			MaskedPaths:   p.MaskedPaths,
			ReadonlyPaths: p.ReadonlyPaths,
			Env:           p.Env,
			Limits: sandbox.Limits{
				MemoryBytes: p.Limits.MemoryBytes,
				CPUTime:     p.Limits.CPUTime.D(),
				Pids:        p.Limits.Pids,
				OpenFiles:   p.Limits.OpenFiles,
			},
			CPUs: p.CPUs,
		}
		for _, b := range p.ReadonlyBinds {
			op.ReadOnlyBinds = append(op.ReadOnlyBinds, oci.Bind{Source: b.Source, Destination: b.Destination})
		}
		if p.UserNS != nil {
			op.UserNS = &oci.IDMap{HostUID: p.UserNS.HostUID, HostGID: p.UserNS.HostGID, Size: p.UserNS.Size}
		}
		profiles[n] = op
	}
	if p := cfg.Backends.OCI.Init; p != "" {
		if _, err := os.Stat(p); err != nil {
			return oci.Options{}, fmt.Errorf("backends.oci.init: %w (build it: gcc -static -Os -o capsule-oci-init sandbox/oci/init/capsule-oci-init.c)", err)
		}
	}
	// Init "" lets the backend find capsule-oci-init beside this binary
	// or in PATH; a configured one must exist and be static (New checks).
	return oci.Options{Root: cfg.Backends.OCI.Root, Profiles: profiles, Runtimes: rts, Init: cfg.Backends.OCI.Init}, nil
}

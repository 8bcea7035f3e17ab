package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/bwrap"
	"github.com/capsule-host/capsule-host/sandbox/local"
	"github.com/capsule-host/capsule-host/sandbox/oci"
)

// buildBackends constructs the backends enabled in the config. A backend
// that cannot start (bwrap missing, no OCI runtime) fails the daemon with
// the reason, rather than failing each capsule's calls later.
func buildBackends(ctx context.Context, cfg *config.Config, lg *slog.Logger) (map[string]sandbox.Backend, error) {
	out := map[string]sandbox.Backend{}
	for _, name := range cfg.Backends.Enabled {
		var (
			b   sandbox.Backend
			err error
		)
		switch name {
		case "local":
			b, err = local.New(local.Options{})
		case "bwrap":
			b, err = newBwrap(cfg)
		case "oci":
			b, err = newOCI(cfg)
		default:
			err = fmt.Errorf("unknown backend %q", name)
		}
		if err != nil {
			return nil, fmt.Errorf("backend %s: %w", name, err)
		}
		out[name] = b
		lg.Debug("backend ready", "backend", name)
	}
	return out, nil
}

func newBwrap(cfg *config.Config) (sandbox.Backend, error) {
	return bwrap.New(bwrap.Options{Path: cfg.Backends.Bwrap.Path, StateDir: cfg.StateDir, Mask: cfg.Backends.Bwrap.Mask})
}

// newOCI passes the config's runtimes and launch profiles through to the
// OCI backend, which validates the profiles itself.
func newOCI(cfg *config.Config) (sandbox.Backend, error) {
	if err := os.MkdirAll(cfg.Backends.OCI.Root, 0o700); err != nil {
		return nil, err
	}
	rts := map[string]string{}
	for n, p := range cfg.Backends.OCI.Runtimes {
		if !filepath.IsAbs(p) {
			lp, err := exec.LookPath(p)
			if err != nil {
				return nil, fmt.Errorf("runtime %q: %q not found in PATH", n, p)
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
			return nil, fmt.Errorf("backends.oci.init: %w (build it: gcc -static -Os -o capsule-oci-init sandbox/oci/init/capsule-oci-init.c)", err)
		}
	}
	// Init "" lets the backend find capsule-oci-init beside this binary
	// or in PATH; a configured one must exist and be static (New checks).
	return oci.New(oci.Options{Root: cfg.Backends.OCI.Root, Profiles: profiles, Runtimes: rts, Init: cfg.Backends.OCI.Init})
}

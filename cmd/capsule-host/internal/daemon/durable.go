package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/registry/statedir"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// durable is what makes persistent processes outlive the daemon: the
// state directory's lock, its keys, the journal, and one keeper-backed
// backend per enabled backend (local, bwrap, OCI): the keeper holds each
// persistent process's stdio and output logs.
type durable struct {
	lock    *statedir.DirLock
	jr      *journal.Journal
	keys    registry.Keys
	keepers map[string]*keeper.Backend
	keep    bool // [processes] on_shutdown = "keep"
}

// openDurable locks the state directory (a second daemon on it is refused,
// naming the holder), loads or creates the keys and opens the journal. A
// damaged journal refuses the start with the fix, unless salvage.
func openDurable(cfg *config.Config, salvage bool, lg *slog.Logger) (d *durable, err error) {
	d = &durable{keepers: map[string]*keeper.Backend{}, keep: cfg.Processes.OnShutdown != config.OnShutdownStop}
	lock, err := statedir.Lock(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	d.lock = lock
	defer func() { // not d.lock: a failed return has set d to nil
		if err != nil {
			lock.Close()
		}
	}()
	for _, k := range []struct {
		file string
		dst  *[32]byte
	}{{statedir.IDHashKeyFile, &d.keys.Hash}, {statedir.CursorMACKeyFile, &d.keys.MAC}, {statedir.IDSealKeyFile, &d.keys.Seal}} {
		b, err := statedir.LoadOrCreateKey(filepath.Join(cfg.StateDir, k.file), len(k.dst))
		if err != nil {
			return nil, fmt.Errorf("state directory key: %w", err)
		}
		copy(k.dst[:], b)
	}
	jr, rep, err := journal.Open(filepath.Join(cfg.StateDir, "journal.db"), journal.Options{Salvage: salvage})
	if errors.Is(err, journal.ErrCorrupt) {
		return nil, fmt.Errorf("%w; `serve --salvage-journal` salvages", err)
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	d.jr = jr
	for _, de := range rep.Dropped {
		lg.Error("journal: record dropped (unreadable)", "err", de)
	}
	if rep.Salvaged {
		lg.Warn("journal salvaged: the damaged file was kept aside", "moved_aside", rep.MovedAside, "dropped", len(rep.Dropped), "corruption", rep.Corruption)
	}
	if dt, exact, ok := rep.Downtime(time.Now()); ok {
		lg.Info("journal opened", "path", rep.Path, "created", rep.Created, "downtime", dt, "clean_shutdown", exact)
	}
	return d, nil
}

// persistentBackends are the keeper-backed twins of the enabled local,
// bwrap and OCI backends, by the same names: persistent spawns go there.
func (d *durable) persistentBackends(cfg *config.Config, set backendSet) (map[string]sandbox.Backend, error) {
	out := map[string]sandbox.Backend{}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "keeper"), 0o700); err != nil {
		return nil, fmt.Errorf("keeper directory: %w", err)
	}
	for name := range set.backends {
		kc := keeper.Config{Dir: filepath.Join(cfg.StateDir, "keeper", name), Name: name}
		switch name {
		case "local":
		case "bwrap":
			opts := bwrapOptions(cfg) // the same sandbox as the daemon's own bwrap
			kc.Bwrap = &opts
		case "oci":
			// The keeper, not the daemon, holds a persistent container's
			// stdio: a daemon's death must not close its pipes.
			opts, err := ociOptions(cfg)
			if err != nil {
				return nil, err
			}
			kc.OCI = &opts
		default:
			continue
		}
		kb, err := keeper.NewBackend(kc)
		if err != nil {
			return nil, err
		}
		d.keepers[name], out[name] = kb, kb
	}
	return out, nil
}

// close ends the durable part after the registry: with the keep policy a
// keeper that holds running processes runs on (one with none exits); with
// stop, every keeper stops what it holds and exits. The journal records
// a clean shutdown; the lock goes last.
func (d *durable) close(ctx context.Context) error {
	var errs []error
	for name, kb := range d.keepers {
		if err := kb.Close(ctx, !d.keep); err != nil && !errors.Is(err, sandbox.ErrUnavailable) {
			errs = append(errs, fmt.Errorf("keeper %s: %w", name, err))
		}
	}
	if err := d.jr.Close(); err != nil {
		errs = append(errs, fmt.Errorf("journal: %w", err))
	}
	if err := d.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("state directory lock: %w", err))
	}
	return errors.Join(errs...)
}

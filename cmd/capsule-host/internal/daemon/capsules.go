package daemon

// Capsule loading and reloading. Start, `capsule-host reload [NAME]` and
// SIGHUP share one reconcile: read the configured directories (the
// bundled set, then the config's capsules), then per capsule name load the
// new, replace the changed (manifest bytes, module sha256, directory),
// skip the unchanged and remove the no longer configured. A capsule that
// fails is recorded and logged and the others keep serving; on reload its
// previous version keeps serving (host.Load swaps only on success).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/bundled"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/registry"
)

var (
	// ErrNoCapsuleLoaded: at start, every configured capsule failed. A
	// daemon that would serve none of them refuses (see RFC: the failure
	// is then systemic, the engine or the state directory, not a capsule).
	ErrNoCapsuleLoaded = errors.New("no capsule could be loaded")
	// ErrNoSuchCapsule: a named reload names a capsule that is neither
	// loaded nor in any readable configured directory.
	ErrNoSuchCapsule = errors.New("no such capsule")
	// ErrConfig: the host config could not be re-read for a reload;
	// nothing was changed.
	ErrConfig = errors.New("host config unreadable")
)

// CapsuleFailure is a capsule directory whose last load failed.
type CapsuleFailure struct {
	// Name is "" when the manifest could not be read and no loaded
	// version came from Dir.
	Name string
	Dir  string
	// Err is the typed error (manifest.ErrInvalid, host.ErrChecksum, ...;
	// see FailureKind).
	Err error
	At  time.Time
	// Serving is the version that keeps serving in its place ("": none).
	Serving string
}

// ReloadResult is what one reconcile did, by capsule name, sorted.
type ReloadResult struct {
	Added, Replaced, Unchanged, Removed []string
	Failed                              []CapsuleFailure
	// ProcessesStopped counts the live processes of removed capsules.
	ProcessesStopped int
}

// loadedCapsule is what the daemon loaded under one name: enough to tell
// an unchanged capsule from a changed one.
type loadedCapsule struct {
	dir         string
	manifestSum [32]byte // of the Capsule.toml bytes read before loading
	moduleSum   string   // the host's Capsule.SHA256
	version     string
}

// capsuleSet is the daemon's record of its capsule directories.
type capsuleSet struct {
	bundled  fs.FS
	reconfig func() (*config.Config, error)
	hangup   <-chan os.Signal
	// watchPoll is serve --watch's poll interval (0: no watching).
	watchPoll time.Duration
	// starting is set during Open's reconcile (its progress is logged and
	// counted for the loading answers).
	starting bool

	reloadMu sync.Mutex // one reconcile at a time
	mu       sync.Mutex // guards loaded and failed: listings read them during a reconcile
	loaded   map[string]loadedCapsule
	failed   map[string]CapsuleFailure // by directory
}

// candidate is one configured capsule directory as read now.
type candidate struct {
	dir string
	m   *manifest.Manifest // nil when err is set
	sum [32]byte
	err error
}

// source is where capsules come from: the bundled set (when enabled),
// extracted under stateDir, then dirs.
type source struct {
	bundled  fs.FS
	stateDir string
	dirs     []string
}

// loadCapsules loads the bundled capsules (when enabled), then the
// config's directories, which may replace a bundled capsule of the same
// name. A capsule that fails is recorded, logged and listed by `capsules`,
// and the daemon serves the others: one broken capsule must not take
// every other capsule's tools (and, with the keeper, their re-adopted
// processes) down with it. Only when every configured capsule fails does
// Open fail, with all the errors.
func (rt *Runtime) loadCapsules(ctx context.Context, o Options) error {
	rt.caps = &capsuleSet{bundled: o.Bundled, reconfig: o.Reconfig, hangup: o.Hangup, watchPoll: o.Watch,
		loaded: map[string]loadedCapsule{}, failed: map[string]CapsuleFailure{}}
	rt.caps.starting = true
	res, err := rt.reconcile(ctx, rt.source(rt.Config), "")
	rt.caps.starting = false
	if err != nil {
		return err
	}
	if len(res.Failed) > 0 && len(res.Added) == 0 {
		errs := make([]error, 0, len(res.Failed))
		for _, f := range res.Failed {
			errs = append(errs, fmt.Errorf("capsule %s: %w", f.Dir, f.Err))
		}
		return fmt.Errorf("%w: all %d configured capsule directories failed: %w", ErrNoCapsuleLoaded, len(res.Failed), errors.Join(errs...))
	}
	return nil
}

func (rt *Runtime) source(cfg *config.Config) source {
	src := source{stateDir: rt.Config.StateDir, dirs: cfg.Capsules}
	if cfg.Bundled == nil || *cfg.Bundled {
		src.bundled = rt.caps.bundled
	}
	return src
}

// Reload re-reads the host config's capsule directories and the bundled
// set (only those two settings: the rest needs a restart) and reconciles
// every capsule, or only name. A replaced capsule keeps its processes and
// in-flight calls finish on the old version; a failed one keeps its
// previous version serving; a capsule no longer configured is removed and
// its processes are stopped (reason removed).
func (rt *Runtime) Reload(ctx context.Context, name string) (ReloadResult, error) {
	if rt.caps == nil {
		return ReloadResult{}, fmt.Errorf("%w: the runtime was not opened", host.ErrClosed)
	}
	cfg := rt.Config
	if rt.caps.reconfig != nil {
		c, err := rt.caps.reconfig()
		if err != nil {
			rt.Log.Error("reload refused: the host config cannot be read; nothing changed", "err", err)
			return ReloadResult{}, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		cfg = c
	}
	res, err := rt.reconcile(ctx, rt.source(cfg), name)
	if err != nil {
		return res, err
	}
	rt.reloaded()
	rt.Log.Info("capsules reloaded", "added", len(res.Added), "replaced", len(res.Replaced), "unchanged", len(res.Unchanged),
		"removed", len(res.Removed), "failed", len(res.Failed), "processes_stopped", res.ProcessesStopped)
	return res, nil
}

// reconcile brings the host to the directories of src: every capsule, or
// only the one named only.
func (rt *Runtime) reconcile(ctx context.Context, src source, only string) (ReloadResult, error) {
	cs := rt.caps
	cs.reloadMu.Lock()
	defer cs.reloadMu.Unlock()
	want, bad := scan(src)
	prev := cs.snapshot()
	names, err := reconcileNames(want, prev, bad, only)
	if err != nil {
		return ReloadResult{}, err
	}
	var res ReloadResult
	failed := map[string]CapsuleFailure{}
	rt.Progress.begin(names, cs.starting, only == "")
	if only == "" {
		for _, c := range bad {
			failed[c.dir] = unreadable(c, prev, want)
			rt.Progress.set(failedState(failed[c.dir]), false)
		}
	}
	for i, name := range names {
		c, wanted := want[name]
		p, had := prev[name]
		switch {
		case wanted:
			rt.compiling(name, c.dir, p.version, i, len(names))
			if f := rt.apply(ctx, name, c, p, had, &res); f != nil {
				failed[f.Dir] = *f
				rt.Progress.set(failedState(*f), true)
			} else {
				rt.Progress.set(api.CapsuleState{Name: name, Dir: c.dir, State: StateReady, Version: cs.snapshot()[name].version}, true)
			}
		case coveredBy(bad, p.dir) != nil:
			// Its directory is configured but unreadable: keep serving.
			f := unreadable(*coveredBy(bad, p.dir), prev, want)
			failed[f.Dir] = f
			rt.Progress.set(failedState(f), true)
		default:
			rt.remove(ctx, name, p, &res)
			rt.Progress.drop(name)
		}
	}
	res.Failed = cs.commitFailures(failed, only, want[only].dir)
	for _, f := range res.Failed {
		rt.Log.Error("capsule failed to load; the daemon serves the others", "capsule", f.Name, "dir", f.Dir,
			"kind", FailureKind(f.Err), "serving", f.Serving, "err", f.Err)
	}
	return res, nil
}

// compiling records that the capsule name (i of n) is being loaded; at
// start the progress is logged (a cold compile takes seconds).
func (rt *Runtime) compiling(name, dir, version string, i, n int) {
	if rt.caps.starting {
		rt.Log.Info("compiling capsule", "n", i+1, "of", n, "capsule", name, "dir", dir)
	}
	rt.Progress.set(api.CapsuleState{Name: name, Dir: dir, State: StateCompiling, Version: version}, false)
}

// failedState is a failure in health.
func failedState(f CapsuleFailure) api.CapsuleState {
	return api.CapsuleState{Name: f.Name, Dir: f.Dir, State: StateFailed, Error: f.Err.Error(), Serving: f.Serving}
}

// reconcileNames is the capsule names a reconcile visits, sorted: every
// wanted or loaded one, or only (which must be one of them).
func reconcileNames(want map[string]candidate, prev map[string]loadedCapsule, bad []candidate, only string) ([]string, error) {
	if only != "" {
		_, w := want[only]
		_, l := prev[only]
		if !w && !l {
			return nil, fmt.Errorf("%w: no capsule %q is loaded or in a configured directory (%d directories could not be read: see `capsule-host capsules`)", ErrNoSuchCapsule, only, len(bad))
		}
		return []string{only}, nil
	}
	set := map[string]bool{}
	for n := range want {
		set[n] = true
	}
	for n := range prev {
		set[n] = true
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// apply loads c under name unless it is unchanged; a failure is returned
// (the previous version, if any, keeps serving).
func (rt *Runtime) apply(ctx context.Context, name string, c candidate, p loadedCapsule, had bool, res *ReloadResult) *CapsuleFailure {
	if had && p.dir == c.dir && p.manifestSum == c.sum && moduleSum(c.m) == p.moduleSum {
		res.Unchanged = append(res.Unchanged, name)
		return nil
	}
	cp, err := rt.Host.Load(ctx, c.dir)
	if err != nil {
		f := &CapsuleFailure{Name: name, Dir: c.dir, Err: err, At: time.Now()}
		if had {
			f.Serving = p.version
		}
		return f
	}
	l := loadedCapsule{dir: c.dir, manifestSum: c.sum, moduleSum: cp.SHA256, version: cp.Manifest.Version}
	if cp.Name() != name {
		// The manifest changed between the scan and the load: record what
		// was loaded; a zero sum makes the next reload look again.
		l.manifestSum = [32]byte{}
		rt.Log.Warn("capsule manifest changed during the reload; reload again", "dir", c.dir, "capsule", cp.Name(), "expected", name)
	}
	rt.caps.mu.Lock()
	rt.caps.loaded[cp.Name()] = l
	rt.caps.mu.Unlock()
	if had {
		res.Replaced = append(res.Replaced, name)
		rt.Log.Info("capsule replaced; its processes are kept", "capsule", name, "version", l.version, "previous", p.version, "dir", c.dir, "previous_dir", p.dir)
	} else {
		res.Added = append(res.Added, name)
		rt.Log.Info("capsule loaded", "capsule", name, "version", l.version, "tools", len(cp.Tools()), "dir", c.dir)
	}
	return nil
}

// remove unloads a capsule that is no longer configured and stops its
// processes: no tool can reach them any more.
func (rt *Runtime) remove(ctx context.Context, name string, p loadedCapsule, res *ReloadResult) {
	live := 0
	for _, in := range rt.Registry.OperatorList(registry.OperatorFilter{Capsule: name, Brief: true}) {
		if in.Phase != registry.PhaseExited {
			live++
		}
	}
	if err := rt.Host.Remove(ctx, name); err != nil && !errors.Is(err, host.ErrUnknownCapsule) {
		rt.Log.Error("removing a capsule that is no longer configured failed", "capsule", name, "err", err)
	}
	rt.caps.mu.Lock()
	delete(rt.caps.loaded, name)
	rt.caps.mu.Unlock()
	res.Removed = append(res.Removed, name)
	res.ProcessesStopped += live
	rt.Log.Warn("capsule removed: it is no longer configured; its persistent processes were stopped", "capsule", name, "dir", p.dir, "stopped", live)
}

// commitFailures records this reconcile's failures and returns them
// sorted by directory: all of them, or for a named reload only those of
// that capsule (the other directories keep their last result).
func (cs *capsuleSet) commitFailures(failed map[string]CapsuleFailure, only, dir string) []CapsuleFailure {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if only == "" {
		cs.failed = failed
	} else {
		for d, f := range cs.failed {
			if f.Name == only || d == dir {
				delete(cs.failed, d)
			}
		}
		for d, f := range failed {
			cs.failed[d] = f
		}
	}
	out := make([]CapsuleFailure, 0, len(failed))
	for _, f := range failed {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out
}

func (cs *capsuleSet) snapshot() map[string]loadedCapsule {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make(map[string]loadedCapsule, len(cs.loaded))
	for k, v := range cs.loaded {
		out[k] = v
	}
	return out
}

// Failures lists the capsule directories whose last load failed, sorted
// by directory.
func (rt *Runtime) Failures() []CapsuleFailure {
	cs := rt.caps
	if cs == nil {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]CapsuleFailure, 0, len(cs.failed))
	for _, f := range cs.failed {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out
}

// scan reads the configured directories in order: a later directory of
// the same capsule name replaces an earlier one, so a config directory
// overrides a bundled capsule. It returns the winner per name and the
// directories that could not be read.
func scan(src source) (map[string]candidate, []candidate) {
	var dirs []string
	var bad []candidate
	if src.bundled != nil {
		dst := filepath.Join(src.stateDir, "capsules")
		bd, err := bundled.Extract(src.bundled, dst)
		if err != nil {
			bad = append(bad, candidate{dir: dst, err: err})
		}
		dirs = append(dirs, bd...)
	}
	dirs = append(dirs, src.dirs...)
	want := map[string]candidate{}
	for _, d := range dirs {
		c := readCandidate(d)
		if c.err != nil {
			bad = append(bad, c)
			continue
		}
		want[c.m.Name] = c
	}
	return want, bad
}

func readCandidate(dir string) candidate {
	file := filepath.Join(dir, manifest.FileName)
	data, err := os.ReadFile(file)
	if err != nil {
		return candidate{dir: dir, err: fmt.Errorf("%w: %w", manifest.ErrInvalid, err)}
	}
	m, err := manifest.Parse(file, data)
	if err != nil {
		return candidate{dir: dir, err: err}
	}
	return candidate{dir: dir, m: m, sum: sha256.Sum256(data)}
}

// unreadable is the failure of a directory that could not be read; when
// exactly one loaded capsule came from it (and no readable directory now
// holds it), that one keeps serving.
func unreadable(c candidate, prev map[string]loadedCapsule, want map[string]candidate) CapsuleFailure {
	f := CapsuleFailure{Dir: c.dir, Err: c.err, At: time.Now()}
	n := 0
	for name, p := range prev {
		if _, moved := want[name]; !moved && within(c.dir, p.dir) {
			n++
			f.Name, f.Serving = name, p.version
		}
	}
	if n != 1 {
		f.Name, f.Serving = "", ""
	}
	return f
}

// coveredBy is the unreadable directory that dir is (or is inside: the
// bundled set's extraction directory), or nil.
func coveredBy(bad []candidate, dir string) *candidate {
	for i := range bad {
		if within(bad[i].dir, dir) {
			return &bad[i]
		}
	}
	return nil
}

func within(parent, dir string) bool {
	return dir == parent || strings.HasPrefix(dir, parent+string(filepath.Separator))
}

// moduleSum is the sha256 of the module file m names, "" when it cannot
// be read (then the load decides, with its own typed error).
func moduleSum(m *manifest.Manifest) string {
	p, err := m.ModulePath()
	if err != nil {
		return ""
	}
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// FailureKind classifies a capsule load error for people and the API.
func FailureKind(err error) string {
	for _, k := range []struct {
		err  error
		kind string
	}{
		{host.ErrChecksum, "checksum"}, {host.ErrImport, "import"}, {host.ErrExport, "export"},
		{host.ErrPolicy, "policy"}, {host.ErrDescribe, "describe"}, {host.ErrInstance, "instance"},
		{host.ErrEngine, "engine"}, {host.ErrClosed, "closed"},
		// A component: an engine that cannot run one (before the class
		// ErrUnsupported it also is), a capsule:process import of another
		// WIT, or a construct or binary the loader refuses.
		{engine.ErrLinkUnsupported, "engine"}, {component.ErrMismatch, "import"},
		{component.ErrUnsupported, "component"}, {component.ErrMalformed, "component"},
		{fs.ErrNotExist, "missing"}, {manifest.ErrInvalid, "manifest"},
	} {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "internal"
}

// FailureView converts a failure to the wire form.
func FailureView(f CapsuleFailure) api.CapsuleFailure {
	return api.CapsuleFailure{Name: f.Name, Dir: f.Dir, Kind: FailureKind(f.Err), Error: f.Err.Error(),
		At: f.At.UTC().Format(time.RFC3339), Serving: f.Serving}
}

// ReloadView converts a reload result to the wire form (empty lists, not
// null, so a client can range over every field).
func ReloadView(r ReloadResult) api.ReloadResponse {
	out := api.ReloadResponse{Added: nonNil(r.Added), Replaced: nonNil(r.Replaced), Unchanged: nonNil(r.Unchanged),
		Removed: nonNil(r.Removed), Failed: make([]api.CapsuleFailure, 0, len(r.Failed)), ProcessesStopped: r.ProcessesStopped}
	for _, f := range r.Failed {
		out.Failed = append(out.Failed, FailureView(f))
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// watchHangup reloads every capsule on each SIGHUP from Options.Hangup
// until the returned stop is called; stop waits for a reload under way.
func (rt *Runtime) watchHangup() (stop func()) {
	if rt.caps == nil || rt.caps.hangup == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-rt.caps.hangup:
				rt.Log.Info("SIGHUP: reloading capsules")
				if _, err := rt.Reload(context.Background(), ""); err != nil {
					rt.Log.Error("SIGHUP reload failed", "err", err)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

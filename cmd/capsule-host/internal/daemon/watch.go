package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/capsule-host/capsule-host/host/manifest"
)

// DefaultWatchPoll is serve --watch's poll interval.
const DefaultWatchPoll = 500 * time.Millisecond

// stamp is what the watcher compares per capsule directory: the size and
// modification time of its manifest and of the module the manifest names.
// A rebuild (build.sh renames the new module over the old, then pin
// rewrites the manifest) changes one of them; editing the source does
// not, and needs no reload.
type stamp struct {
	manifest, module fileStamp
	name             string // the manifest's capsule name, "" if unparsable
}

type fileStamp struct {
	size  int64
	mtime int64
	ok    bool
}

func statFile(p string) fileStamp {
	fi, err := os.Stat(p)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ok: true}
}

func stampDir(dir string) stamp {
	file := filepath.Join(dir, manifest.FileName)
	s := stamp{manifest: statFile(file)}
	data, err := os.ReadFile(file)
	if err != nil {
		return s
	}
	m, err := manifest.ParseUnpinned(file, data)
	if err != nil {
		return s
	}
	s.name = m.Name
	if mp, err := m.ModulePath(); err == nil {
		s.module = statFile(mp)
	}
	return s
}

// watchDirs is the directories serve --watch polls: the config's capsule
// directories and every directory a capsule was loaded from or failed in
// (the bundled set's extraction is left out: it changes only with the
// binary).
func (rt *Runtime) watchDirs() []string {
	set := map[string]bool{}
	for _, d := range rt.Config.Capsules {
		set[d] = true
	}
	cs := rt.caps
	cs.mu.Lock()
	for _, l := range cs.loaded {
		set[l.dir] = true
	}
	for d := range cs.failed {
		set[d] = true
	}
	cs.mu.Unlock()
	bundled := filepath.Join(rt.Config.StateDir, "capsules")
	dirs := make([]string, 0, len(set))
	for d := range set {
		if !within(bundled, d) {
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	return dirs
}

// watch reloads a capsule when its directory's stamp changed and then held
// still for one poll (so a build that renames the module and then pins
// the manifest is reloaded once, when both are written), until the
// returned stop is called; stop waits for a reload under way. A reload
// that fails keeps the previous version serving and is logged and listed
// by `capsules` (Reload's contract); the watcher tries again on the next
// change.
func (rt *Runtime) watch() (stop func()) {
	if rt.caps == nil || rt.caps.watchPoll <= 0 {
		return func() {}
	}
	poll := rt.caps.watchPoll
	quit, done := make(chan struct{}), make(chan struct{})
	applied := map[string]stamp{} // what the last reload saw, by directory
	for _, d := range rt.watchDirs() {
		applied[d] = stampDir(d)
	}
	rt.Log.Info("watching capsule directories for changes", "dirs", len(applied), "poll", poll)
	go func() {
		defer close(done)
		t := time.NewTicker(poll)
		defer t.Stop()
		seen := map[string]stamp{} // the previous poll's stamps
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				rt.watchOnce(applied, seen)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// watchOnce is one poll of every watched directory.
func (rt *Runtime) watchOnce(applied, seen map[string]stamp) {
	for _, d := range rt.watchDirs() {
		now := stampDir(d)
		prevPoll, polled := seen[d]
		seen[d] = now
		last, known := applied[d]
		if !known {
			applied[d] = now // a directory seen for the first time: its load was Open's or a reload's
			continue
		}
		if now == last || !polled || now != prevPoll {
			continue // unchanged, or still changing: wait until it holds still
		}
		applied[d] = now
		rt.watchReload(d, now.name, last.name)
	}
}

// watchReload reloads the capsule of dir by name (the manifest's now, else
// the one loaded from it before); a name the daemon does not know (a new
// or renamed capsule) reconciles every capsule instead.
func (rt *Runtime) watchReload(dir, name, before string) {
	name = pick(name, before)
	rt.Log.Info("capsule directory changed: reloading", "dir", dir, "capsule", name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := rt.Reload(ctx, name) // "": every capsule
	if name != "" && errors.Is(err, ErrNoSuchCapsule) {
		res, err = rt.Reload(ctx, "")
	}
	if err != nil {
		rt.Log.Error("watch reload failed; the previous version keeps serving", "dir", dir, "err", err)
		return
	}
	for _, f := range res.Failed {
		if f.Dir == dir {
			rt.Log.Error("watch reload: the rebuilt capsule did not load; the previous version keeps serving",
				"capsule", f.Name, "dir", dir, "kind", FailureKind(f.Err), "serving", f.Serving, "err", f.Err)
		}
	}
}

func pick(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Package bwrap is the bubblewrap backend: the local backend's process
// ownership (session, cgroup, pidfd, limits, pipes, settling, reaping)
// with bwrap as the root of every process tree.
//
// Inside the sandbox the host root is visible read-only, with a fresh
// /dev, /proc and private /tmp; only the workspace is writable; the
// host's state directory and the operator's credential directories are
// masked by empty tmpfs (directories) or /dev/null (files); every
// namespace is unshared (the network only stays shared when the spec
// grants it); the sandbox gets a new session (no TIOCSTI into the host's
// terminal) and dies with its parent.
//
// Signals. bwrap's outer process does not forward signals and dies of a
// SIGTERM, which would take the sandbox down with it (die-with-parent):
// a graceful stop would then never time out. So catchable signals go to
// the sandboxed processes only (the descendants of bwrap), and bwrap
// exits when its child does. SIGKILL goes through the local backend to
// the whole tree and cgroup. bwrap reports a child killed by signal n as
// exit code 128+n; the backend turns that back into Exit.Signal = n, so
// that Exits mean the same as in the local backend (a program exiting
// with 128+n itself is therefore reported as killed by n).
package bwrap

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// HomeCredentials are the operator's credential paths masked in every
// sandbox, relative to Options.Home.
var HomeCredentials = []string{".ssh", ".aws", ".gnupg", ".netrc", ".docker", ".kube", ".config/gcloud"}

// RuntimeSockets are masked in every sandbox, with the operator's
// $XDG_RUNTIME_DIR. The host root is bound read-only, but connect() to a
// unix socket works on a read-only mount, and the sandbox runs as the
// host's user: the daemon's own API socket, the session and system
// buses (systemd-run) and container engines would run anything outside.
var RuntimeSockets = []string{"/run/user", "/run/dbus", "/run/systemd/private", "/run/docker.sock", "/run/containerd", "/run/podman"}

// Options configure a Backend.
type Options struct {
	// Name is the backend name in every Ref (default "bwrap").
	Name string
	// Path is the bwrap binary (default: looked up in PATH).
	Path string
	// StateDir is the host's state directory, masked in every sandbox.
	StateDir string
	// Home is the operator's home whose HomeCredentials are masked
	// (default: os.UserHomeDir()).
	Home string
	// Mask lists more absolute paths to mask (from the host config).
	Mask []string
	// NoCgroups is passed to the local backend (tests of the fallback).
	NoCgroups bool
	// Multiplex is passed to the local backend (the keeper sets it).
	Multiplex bool
	// User, when set, is the unprivileged host uid:gid the sandboxed
	// program runs as. Needed when the daemon is root: bwrap then maps
	// sandbox root to host root with every capability in its user
	// namespace, which reads /root and /etc/shadow and can even remount
	// the read-only root read-write. bwrap still builds the sandbox as
	// root; setpriv, run inside it, drops to User (no capabilities, no
	// supplementary groups) before the program runs, and each workspace
	// is given to User so that it stays writable.
	User *sandbox.Owner
	// Setpriv is the setpriv binary used with User (default: looked up in
	// PATH; util-linux).
	Setpriv string
}

// Backend is the bubblewrap backend. Safe for concurrent use.
type Backend struct {
	*local.Backend
	path  string
	masks []string // absolute, clean; may not exist
	// drop is the argv prefix that drops to Options.User inside the
	// sandbox (nil: none); user is that owner.
	drop []string
	user *sandbox.Owner

	mu    sync.Mutex
	procs map[string]*record
}

var _ sandbox.Backend = (*Backend)(nil)

// record is what the bwrap layer remembers of a process.
type record struct {
	grace time.Duration
	cpu   time.Duration // RLIMIT_CPU as set (rounded up to seconds)

	mu   sync.Mutex
	exit *sandbox.Exit // translated once, so Wait and Inspect agree
}

// translate maps bwrap's report of a child killed by signal n (exit code
// 128+n: bwrap cannot say otherwise) back to a signal exit, and tells a
// CPU-limit kill from others. A program that itself exits with 128+n is
// reported as killed by n: the one ambiguity of this backend. The result
// is computed once per process.
func (r *record) translate(e sandbox.Exit, stats func() sandbox.Stats) sandbox.Exit {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exit != nil {
		return *r.exit
	}
	if e.Signal == 0 && e.Code > 128 && e.Code < 128+32 {
		e.Signal, e.Code = syscall.Signal(e.Code-128), 0
	}
	if e.KilledFor == "" && r.cpu > 0 {
		switch e.Signal {
		case syscall.SIGXCPU:
			e.KilledFor = sandbox.LimitCPU
		case syscall.SIGKILL:
			if st := stats(); st.CPUTime != nil && *st.CPUTime >= r.cpu {
				e.KilledFor = sandbox.LimitCPU
			}
		}
	}
	r.exit = &e
	return e
}

// New checks the bwrap binary and the mask paths and returns a backend.
func New(opts Options) (*Backend, error) {
	path := opts.Path
	if path == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, fmt.Errorf("bwrap: binary not found (apt-get install bubblewrap): %w: %w", sandbox.ErrUnavailable, err)
		}
		path = p
	}
	if err := checkPath("bwrap path", path); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("bwrap: %w: %w", sandbox.ErrUnavailable, err)
	}
	home := opts.Home
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	var masks []string
	add := func(field, p string) error {
		if err := checkPath(field, p); err != nil {
			return err
		}
		masks = append(masks, p)
		return nil
	}
	if opts.StateDir != "" {
		if err := add("state dir", opts.StateDir); err != nil {
			return nil, err
		}
	}
	if home != "" && home != "/" {
		for _, c := range HomeCredentials {
			if err := add("home", filepath.Join(home, c)); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range opts.Mask {
		if err := add("mask", m); err != nil {
			return nil, err
		}
	}
	masks = append(masks, RuntimeSockets...)
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		if d = filepath.Clean(d); d != "/" && checkPath("runtime dir", d) == nil {
			masks = append(masks, d)
		}
	}
	b := &Backend{path: path, masks: masks, procs: map[string]*record{}}
	if err := b.setUser(opts); err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = "bwrap"
	}
	lb, err := local.New(local.Options{Name: name, Wrap: b.wrap, NoCgroups: opts.NoCgroups, Multiplex: opts.Multiplex})
	if err != nil {
		return nil, err
	}
	b.Backend = lb
	return b, nil
}

// setUser prepares the drop to opts.User: setpriv must exist, and the
// ids must not be root's.
func (b *Backend) setUser(opts Options) error {
	u := opts.User
	if u == nil {
		return nil
	}
	if u.UID <= 0 || u.GID <= 0 {
		return fmt.Errorf("bwrap: user %d:%d: the sandbox user must not be root (nor negative): %w", u.UID, u.GID, sandbox.ErrInvalidSpec)
	}
	sp := opts.Setpriv
	if sp == "" {
		p, err := exec.LookPath("setpriv")
		if err != nil {
			return fmt.Errorf("bwrap: setpriv not found (apt-get install util-linux), needed to run sandboxes as uid %d: %w: %w", u.UID, sandbox.ErrUnavailable, err)
		}
		sp = p
	}
	if err := checkPath("setpriv path", sp); err != nil {
		return err
	}
	own := *u
	b.user = &own
	b.drop = []string{sp, "--reuid", strconv.Itoa(u.UID), "--regid", strconv.Itoa(u.GID), "--clear-groups", "--"}
	return nil
}

// checkPath refuses paths bwrap must never see: relative or unclean ones
// and those with quotes, backslashes, newlines or NUL (the peer runtime's
// rule: such strings have broken sandboxes built from shell-ish argv).
func checkPath(field, p string) error {
	if p == "" {
		return fmt.Errorf("bwrap: %s: empty path: %w", field, sandbox.ErrInvalidSpec)
	}
	if strings.ContainsAny(p, "\"'\\\x00\n\r") {
		return fmt.Errorf("bwrap: %s: path %q contains a quote, backslash, newline or NUL: %w", field, p, sandbox.ErrInvalidSpec)
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("bwrap: %s: path %q is relative: %w", field, p, sandbox.ErrInvalidSpec)
	}
	if filepath.Clean(p) != p {
		return fmt.Errorf("bwrap: %s: path %q is not clean: %w", field, p, sandbox.ErrBoundaryEscape)
	}
	return nil
}

// mount is one filesystem step of the bwrap command line.
type mount struct {
	path string
	args []string
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// Args returns bwrap's argv for spec (without the binary itself). It is
// exported for tests and for operators who want to see the sandbox.
func (b *Backend) Args(spec sandbox.ProcessSpec) ([]string, error) {
	ws := spec.Isolation.Workspace
	if err := checkPath("isolation.workspace", ws); err != nil {
		return nil, err
	}
	if err := checkPath("cwd", spec.Cwd); err != nil {
		return nil, err
	}
	if rel, err := filepath.Rel(ws, spec.Cwd); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("bwrap: cwd %q is outside the workspace %q: %w", spec.Cwd, ws, sandbox.ErrBoundaryEscape)
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("bwrap: isolation.workspace %q is not a directory: %w", ws, sandbox.ErrInvalidSpec)
	}
	// Mount steps, applied shallowest first so that a deeper step lands
	// on top of a shallower one: a workspace inside the (masked) state
	// directory is bound over the mask's tmpfs, a credential directory
	// inside the workspace is masked over the bind. Ties: masks first.
	steps := []mount{{"/tmp", []string{"--tmpfs", "/tmp"}}}
	for _, m := range b.masks {
		fi, err := os.Stat(m)
		if err != nil {
			continue // nothing there to hide
		}
		real, err := filepath.EvalSymlinks(m)
		if err != nil || checkPath("mask", real) != nil {
			return nil, fmt.Errorf("bwrap: mask %q resolves to an unusable path %q: %w", m, real, sandbox.ErrInvalidSpec)
		}
		if fi.IsDir() {
			steps = append(steps, mount{real, []string{"--tmpfs", real}})
		} else {
			steps = append(steps, mount{real, []string{"--ro-bind", "/dev/null", real}})
		}
	}
	wsStep := mount{ws, []string{"--bind", ws, ws}}
	slices.SortStableFunc(steps, func(a, c mount) int { return depth(a.path) - depth(c.path) })
	var fsArgs []string
	placed := false
	for _, s := range steps {
		if !placed && depth(s.path) > depth(ws) {
			fsArgs = append(fsArgs, wsStep.args...)
			placed = true
		}
		fsArgs = append(fsArgs, s.args...)
	}
	if !placed {
		fsArgs = append(fsArgs, wsStep.args...)
	}
	args := append([]string{"--die-with-parent"}, b.unshare(spec.Isolation.Network)...)
	if spec.Terminal == nil {
		// --new-session (setsid) keeps a sandboxed program from pushing
		// input into a controlling terminal it shares with the host
		// (TIOCSTI). A terminal process keeps its session instead: the
		// local backend made it a new session whose controlling tty is the
		// process's own PTY, never the daemon's, so TIOCSTI reaches only the
		// program's own input; setsid here would drop that tty (no job
		// control, no C-c).
		args = append(args, "--new-session")
	}
	args = append(args,
		"--ro-bind", "/", "/",
		"--dev", "/dev",
		"--proc", "/proc",
	)
	prog, err := program(spec)
	if err != nil {
		return nil, err
	}
	args = append(args, fsArgs...)
	args = append(args, "--chdir", spec.Cwd, "--")
	args = append(args, b.drop...)
	return append(args, prog...), nil
}

// program is the argv bwrap runs. What the exec-list check resolved
// (spec.Path) must be what runs, but bwrap 0.8 and setpriv exec their
// argv[0]: the file and the invoked name cannot differ. The name is kept
// when no guest can have changed where it leads since the check: it lies
// outside the workspace, the only place in the sandbox a guest writes
// (/bin/sh to dash is the system's own link). A name inside the
// workspace is a guest's symlink: it runs as its checked file, which is
// harmless when the base name is the same and refused when it is not (a
// multi-call binary would run as another program).
func program(spec sandbox.ProcessSpec) ([]string, error) {
	if spec.Path == "" || spec.Path == spec.Argv[0] || !sandbox.Within(spec.Isolation.Workspace, spec.Argv[0]) {
		return spec.Argv, nil
	}
	if filepath.Base(spec.Path) != filepath.Base(spec.Argv[0]) {
		return nil, fmt.Errorf("bwrap: argv[0] %q is a link in the workspace to %q, which bwrap cannot run under the name it was invoked by: %w", spec.Argv[0], spec.Path, sandbox.ErrInvalidSpec)
	}
	return append([]string{spec.Path}, spec.Argv[1:]...), nil
}

// unshare is the namespace flags: every namespace, the network only
// when granted. With a sandbox user (the daemon is root) bwrap stays in
// the host's user namespace: a new one would map sandbox root to host
// root, and bwrap (as that root) could not even enter a workspace owned
// by the sandbox user; the program loses root through setpriv instead.
func (b *Backend) unshare(network bool) []string {
	var out []string
	if b.user == nil {
		out = []string{"--unshare-all"}
		if network {
			out = append(out, "--share-net")
		}
		return out
	}
	out = []string{"--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"}
	if !network {
		out = append(out, "--unshare-net")
	}
	return out
}

func (b *Backend) wrap(spec sandbox.ProcessSpec) ([]string, error) {
	args, err := b.Args(spec)
	if err != nil {
		return nil, err
	}
	return append([]string{b.path}, args...), nil
}

// Start implements sandbox.Backend. bwrap's outer process and the
// sandbox's pid-1 init count against the pids limit, so it is raised by
// two: the spec's budget stays the caller's.
func (b *Backend) Start(ctx context.Context, spec sandbox.ProcessSpec) (sandbox.Handle, error) {
	if spec.Limits.Pids > 0 {
		spec.Limits.Pids += 2
	}
	if err := b.giveWorkspace(spec.Isolation.Workspace); err != nil {
		return nil, err
	}
	h, err := b.Backend.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	r := &record{grace: spec.Grace}
	if spec.Limits.CPUTime > 0 {
		r.cpu = time.Duration(math.Ceil(spec.Limits.CPUTime.Seconds())) * time.Second
	}
	b.mu.Lock()
	b.procs[h.Ref().ID] = r
	b.mu.Unlock()
	return &handle{Handle: h, r: r}, nil
}

// giveWorkspace makes ws (the principal's workspace, checked by Args to
// be a clean absolute directory) owned by the sandbox user, so that the
// dropped program can write it. Lchown: a symlink is never followed.
func (b *Backend) giveWorkspace(ws string) error {
	if b.user == nil {
		return nil
	}
	fi, err := os.Lstat(ws)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("bwrap: isolation.workspace %q is not a directory: %w", ws, sandbox.ErrInvalidSpec)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == b.user.UID && int(st.Gid) == b.user.GID {
		return nil
	}
	if err := os.Lchown(ws, b.user.UID, b.user.GID); err != nil {
		return fmt.Errorf("bwrap: giving the workspace %q to uid %d: %w: %w", ws, b.user.UID, sandbox.ErrUnavailable, err)
	}
	return nil
}

func (b *Backend) record(id string) *record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.procs[id]
}

// Attach implements sandbox.Backend.
func (b *Backend) Attach(ctx context.Context, ref sandbox.Ref) (sandbox.Handle, error) {
	h, err := b.Backend.Attach(ctx, ref)
	if err != nil {
		return nil, err
	}
	if hh, ok := h.(*handle); ok {
		return hh, nil
	}
	r := b.record(ref.ID)
	if r == nil {
		return nil, fmt.Errorf("bwrap: process %s: %w", ref.ID, sandbox.ErrNotFound)
	}
	return &handle{Handle: h, r: r}, nil
}

// Inspect implements sandbox.Backend, with the same exit translation as
// Wait.
func (b *Backend) Inspect(ctx context.Context, ref sandbox.Ref) (sandbox.Inspection, error) {
	ins, err := b.Backend.Inspect(ctx, ref)
	if err != nil || ins.Exit == nil {
		return ins, err
	}
	if r := b.record(ref.ID); r != nil {
		var st func() sandbox.Stats = func() sandbox.Stats { return sandbox.Stats{} }
		if h, err := b.Backend.Attach(ctx, ref); err == nil {
			st = h.Stats
		}
		e := r.translate(*ins.Exit, st)
		ins.Exit = &e
	}
	return ins, nil
}

// Cleanup implements sandbox.Backend.
func (b *Backend) Cleanup(ctx context.Context, ref sandbox.Ref) error {
	if err := b.Backend.Cleanup(ctx, ref); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.procs, ref.ID)
	b.mu.Unlock()
	return nil
}

// handle wraps the local handle: signals and exits as described in the
// package comment; everything else is the local backend's.
type handle struct {
	sandbox.Handle
	r *record
}

// Resize implements sandbox.Resizer: the local backend's PTY.
func (h *handle) Resize(rows, cols uint16) error {
	r, ok := h.Handle.(sandbox.Resizer)
	if !ok {
		return fmt.Errorf("resize %s: %w", h.Ref().ID, sandbox.ErrNoTerminal)
	}
	return r.Resize(rows, cols)
}

var _ sandbox.Resizer = (*handle)(nil)

// AfterDone implements sandbox.AfterDoner: the local backend's.
func (h *handle) AfterDone(f func()) {
	if a, ok := h.Handle.(sandbox.AfterDoner); ok {
		a.AfterDone(f)
		return
	}
	go func() { <-h.Done(); f() }()
}

func (h *handle) exited() bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

func (h *handle) Wait(ctx context.Context) (sandbox.Exit, error) {
	e, err := h.Handle.Wait(ctx)
	if err != nil {
		return e, err
	}
	return h.r.translate(e, h.Stats), nil
}

// Signal delivers sig to the sandboxed processes. SIGKILL goes to the
// whole tree through the local backend.
func (h *handle) Signal(sig syscall.Signal) error {
	if h.exited() {
		return nil
	}
	if sig == syscall.SIGKILL {
		return h.Handle.Signal(sig)
	}
	return signalDescendants(h.PID(), sig, h.Done())
}

func (h *handle) Terminate(ctx context.Context, mode sandbox.TerminateMode) (sandbox.Exit, error) {
	if h.exited() {
		return h.Wait(ctx)
	}
	switch mode {
	case sandbox.Graceful:
		if err := h.Signal(syscall.SIGTERM); err != nil {
			return sandbox.Exit{}, err
		}
		t := time.NewTimer(h.r.grace)
		defer t.Stop()
		select {
		case <-h.Done():
			return h.Wait(ctx)
		case <-t.C:
			return sandbox.Exit{}, fmt.Errorf("bwrap: process %s still running %v after SIGTERM: %w", h.Ref().ID, h.r.grace, sandbox.ErrGracefulTimeout)
		case <-ctx.Done():
			return sandbox.Exit{}, ctx.Err()
		}
	case sandbox.Force:
		e, err := h.Handle.Terminate(ctx, sandbox.Force)
		if err != nil {
			return e, err
		}
		return h.r.translate(e, h.Stats), nil
	}
	return sandbox.Exit{}, fmt.Errorf("terminate mode %d: %w", mode, sandbox.ErrInvalidSpec)
}

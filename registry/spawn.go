package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/sandbox"
)

// caller returns the ctx's Caller as an owner, validated. A missing caller
// is a host bug (ErrInternal), never a panic.
func (r *Registry) caller(ctx context.Context) (owner, error) {
	if ctx == nil {
		return owner{}, fmt.Errorf("%w: nil call context", ErrInternal)
	}
	c, ok := CallerFrom(ctx)
	if !ok {
		return owner{}, fmt.Errorf("%w: the call context carries no caller", ErrInternal)
	}
	if c.Capsule == "" {
		return owner{}, fmt.Errorf("%w: the caller has no capsule", ErrInternal)
	}
	if !c.Fallback || c.Principal != "" {
		if err := ValidPrincipal(c.Principal); err != nil {
			return owner{}, err
		}
	}
	return owner{capsule: c.Capsule, principal: c.Principal, fallback: c.Fallback}, nil
}

// prepared is a validated spawn, ready to reserve and start.
type prepared struct {
	spec    sandbox.ProcessSpec
	backend sandbox.Backend
	cs      *capsuleState
	command string
	label   string
	persist *PersistOptions
}

// prepare validates a request against the capsule's policy and builds the
// full ProcessSpec. Nothing starts here; the only side effect is the
// principal's workspace directory.
// openStdin keeps stdin open after the prelude: spawn-background handles
// offer write-stdin and close-stdin, so their stdin must stay writable
// until closed or the handle is dropped.
func (r *Registry) prepare(o owner, req SpawnRequest, persist *PersistOptions, openStdin bool) (*prepared, error) {
	snap, err := r.capsuleFor(o)
	if err != nil {
		return nil, err
	}
	pol := &snap.policy
	if err := checkPersistAllowed(o, pol, persist); err != nil {
		return nil, err
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	be := r.cfg.Backends[pol.Backend]
	if pb := r.cfg.Persistent[pol.Backend]; persist != nil && pb != nil {
		be = pb // outlives the daemon (a keeper's)
	}
	if be == nil {
		return nil, fmt.Errorf("%w: backend %q is not configured on this host", ErrUnavailable, pol.Backend)
	}
	if len(req.Stdin) > r.cfg.Defaults.StdinPreludeMax {
		return nil, fmt.Errorf("%w: stdin prelude is %d bytes (max %d)", ErrTooLarge, len(req.Stdin), r.cfg.Defaults.StdinPreludeMax)
	}
	env, err := buildEnv(r.cfg.HostEnv, pol.Env, req.Env)
	if err != nil {
		return nil, err
	}
	argv0, file, err := r.resolveCommand(o, snap, req.Cmd, envPath(env))
	if err != nil {
		return nil, err
	}
	ws, err := principalWorkspace(pol.Workspace, o, pol.WorkspaceOwner)
	if err != nil {
		return nil, err
	}
	cwd, err := confineCwd(ws, req.Cwd)
	if err != nil {
		return nil, err
	}
	pr := &prepared{backend: be, cs: snap.cs, command: req.Cmd, persist: persist, label: deriveLabel(req.Cmd)}
	pr.spec = sandbox.ProcessSpec{
		Argv:      append([]string{argv0}, req.Args...),
		Path:      file,
		Cwd:       cwd,
		Env:       env,
		Stdin:     stdinSpec(req, openStdin),
		Output:    r.outputSpec(pol.OutputRate),
		Grace:     r.cfg.Defaults.StopGraceCap, // the registry bounds each graceful stop with its own ctx
		Drain:     r.cfg.Defaults.Drain,
		Limits:    pol.Limits,
		Isolation: sandbox.IsolationSpec{Workspace: ws, Network: pol.Network, Profile: pol.Profile},
	}
	if persist != nil {
		if err := applyPersist(pr, req, pol.Limits); err != nil {
			return nil, err
		}
	}
	pr.spec.Label = pr.label
	return pr, nil
}

// capsuleSnap is a capsule's state as of one spawn: RegisterCapsule
// replaces policy and exec lists in place (under r.mu), so a spawn works
// on a copy taken under the lock.
type capsuleSnap struct {
	cs            *capsuleState
	policy        CapsulePolicy
	exec, literal map[string]bool
}

// capsuleFor snapshots the caller's capsule, refusing when the registry
// is shut down or the capsule is not registered.
func (r *Registry) capsuleFor(o owner) (capsuleSnap, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return capsuleSnap{}, fmt.Errorf("%w: registry is shut down", ErrUnavailable)
	}
	cs := r.capsules[o.capsule]
	if cs == nil || cs.adopted {
		return capsuleSnap{}, fmt.Errorf("%w: capsule %q is not registered with the process registry", ErrCapabilityDenied, o.capsule)
	}
	return capsuleSnap{cs: cs, policy: cs.policy, exec: cs.exec, literal: cs.literal}, nil
}

// checkPersistAllowed refuses a persistent spawn the caller or the
// capsule may not make.
func checkPersistAllowed(o owner, pol *CapsulePolicy, persist *PersistOptions) error {
	switch {
	case persist == nil:
		return nil
	case o.fallback:
		return fmt.Errorf("%w: the call carries no principal (owner-fallback); persistent processes need an authenticated principal", ErrPersistUnsupported)
	case !pol.AllowPersistent:
		return fmt.Errorf("%w: capsule %q does not declare allow_persistent", ErrPersistUnsupported, o.capsule)
	}
	return nil
}

// checkRequest refuses a malformed command: none, or a NUL in it or in
// an argument.
func checkRequest(req SpawnRequest) error {
	if req.Cmd == "" {
		return fmt.Errorf("%w: cmd is empty", ErrInvalidInput)
	}
	if strings.IndexByte(req.Cmd, 0) >= 0 {
		return fmt.Errorf("%w: cmd contains NUL", ErrInvalidInput)
	}
	for i, a := range req.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: args[%d] contains NUL", ErrInvalidInput, i)
		}
	}
	return nil
}

// envPath is the PATH a bare command is looked up on: the process's own,
// which only the host sets (Config.HostEnv; sandbox.BuildEnv refuses a
// caller's), else DefaultPath.
func envPath(env []string) string {
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return path
}

// resolveCommand enforces the exec list where the process will run: in
// the policy's exec root, or on the host. A backend whose commands run
// inside a root (BackendPolicy.ExecInRoot) never falls back to the host
// when the root is unknown: that would check a file the sandbox never
// runs. file is the host file to execute (ProcessSpec.Path), empty in a
// root: the image is not the guest's to change (the workspace and other
// mounted-over paths are refused there), and its runtime execs by name.
func (r *Registry) resolveCommand(o owner, snap capsuleSnap, cmd, path string) (argv0, file string, err error) {
	pol := &snap.policy
	switch {
	case pol.ExecRoot != "":
		argv0, _, err = resolveExecInRoot(cmd, path, pol.ExecRoot, pol.ExecHidden, snap.exec, snap.literal)
		return argv0, "", err
	case r.cfg.Policies[pol.Backend].ExecInRoot:
		return "", "", fmt.Errorf("%w: capsule %q uses the %s backend but its policy has no exec root (the host sets it from the launch profile)", ErrUnavailable, o.capsule, pol.Backend)
	}
	return resolveExec(cmd, path, snap.exec, snap.literal)
}

// stdinSpec is the stdin of a spawn: closed, the prelude then EOF, or
// (openStdin) the prelude then open for writes.
func stdinSpec(req SpawnRequest, openStdin bool) sandbox.StdinSpec {
	switch {
	case openStdin:
		return sandbox.StdinSpec{Mode: sandbox.StdinOpen, Data: req.Stdin}
	case req.HasStdin || req.Stdin != nil:
		return sandbox.StdinSpec{Mode: sandbox.StdinBytes, Data: req.Stdin}
	}
	return sandbox.StdinSpec{Mode: sandbox.StdinClosed}
}

// outputSpec is the host's default output log of a process, with the
// capsule's capture rate where it is lower than the host's.
func (r *Registry) outputSpec(capsuleRate int64) sandbox.OutputSpec {
	rate := r.cfg.Defaults.OutputRate
	if capsuleRate > 0 && (rate.BytesPerSec == 0 || capsuleRate < rate.BytesPerSec) {
		rate.BytesPerSec = capsuleRate
	}
	return sandbox.OutputSpec{
		RingBytes:  r.cfg.Defaults.LogRingBytes,
		SpillBytes: r.cfg.Defaults.SpillBytes,
		Overflow:   sandbox.DropOldest,
		SpillDir:   r.cfg.StateDir,
		Rate:       rate,
	}
}

// applyPersist applies a persistent spawn's options to pr: the label,
// stdin kept open, the overflow policy and ring size, limits tightened
// from the capsule's, and the bounds on the timing options.
func applyPersist(pr *prepared, req SpawnRequest, capsule sandbox.Limits) error {
	persist, spec := pr.persist, &pr.spec
	if persist.Label != nil {
		if err := validLabel(*persist.Label); err != nil {
			return err
		}
		pr.label = *persist.Label
	}
	if persist.KeepStdinOpen {
		spec.Stdin = sandbox.StdinSpec{Mode: sandbox.StdinOpen, Data: req.Stdin}
	}
	if err := applyTerminal(pr, req); err != nil {
		return err
	}
	switch persist.Overflow {
	case 0, sandbox.DropOldest:
	case sandbox.Backpressure:
		spec.Output.Overflow = sandbox.Backpressure
	default:
		return fmt.Errorf("%w: overflow policy %d is unknown", ErrInvalidInput, persist.Overflow)
	}
	if persist.LogRingBytes != nil {
		spec.Output.RingBytes = clampInt(int(*persist.LogRingBytes), minRingBytes, maxRingBytes)
	}
	var err error
	if spec.Limits, err = effectiveLimits(capsule, persist.Limits); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{{"max-lifetime-ms", persist.MaxLifetime}, {"idle-timeout-ms", persist.IdleTimeout}} {
		if d.v != nil && *d.v <= 0 {
			return fmt.Errorf("%w: %s must be > 0", ErrInvalidInput, d.name)
		}
	}
	if persist.ExitRetention != nil && *persist.ExitRetention < 0 {
		return fmt.Errorf("%w: exit-retention-ms must be >= 0", ErrInvalidInput)
	}
	return nil
}

// resolveExec enforces the capsule's exec list before anything starts:
// the command is resolved (absolute path, or lookup on the sandbox PATH),
// symlinks evaluated, and (resolved file, invoked base name) compared
// exactly (never by prefix) with the allowed entries, as in execroot.go: a
// multi-call binary (busybox) picks its applet from argv[0], so matching
// the file alone, or running it by its resolved path, would let an allowed
// "true" applet run every other one. argv[0] is the path as invoked. A
// command that is neither allowed nor found is capability-denied, so a
// guest cannot probe the host's filesystem; only an allowed-but-missing
// entry says "not found".
func resolveExec(cmd, path string, allowed, literal map[string]bool) (argv0, file string, err error) {
	return matchExec(cmd, path, allowed, literal, "on this host",
		func(c string) bool {
			fi, err := os.Stat(c)
			return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
		},
		filepath.EvalSymlinks)
}

// matchExec is the exec-list check shared by host and image roots:
// found tells whether a PATH candidate is an executable there, resolve
// gives an existing candidate's real file, where names the root in the
// "allowed but not found" message. It returns the name to invoke the
// program by (argv[0]: a multi-call binary reads it) and the real file
// that was checked: the backend runs that file, so a symlink swapped
// after the check changes nothing (ProcessSpec.Path).
func matchExec(cmd, path string, allowed, literal map[string]bool, where string, found func(string) bool, resolve func(string) (string, error)) (argv0, file string, err error) {
	cand := ""
	switch {
	case filepath.IsAbs(cmd):
		cand = filepath.Clean(cmd)
	case strings.ContainsRune(cmd, '/'):
		return "", "", fmt.Errorf("%w: command %q: a path must be absolute", ErrCapabilityDenied, cmd)
	default:
		for _, dir := range filepath.SplitList(path) {
			if c := filepath.Join(dir, cmd); filepath.IsAbs(dir) && found(c) {
				cand = c
				break
			}
		}
	}
	if cand != "" {
		res, err := resolve(cand)
		switch {
		case err == nil && allowed[rootExecKey(res, cand)]:
			return cand, res, nil
		case err != nil && literal[cand] && errors.Is(err, fs.ErrNotExist):
			return "", "", fmt.Errorf("%w: command %q: allowed but not found %s", ErrInvalidInput, cmd, where)
		}
	}
	return "", "", fmt.Errorf("%w: command %q is not in the capsule's exec list", ErrCapabilityDenied, cmd)
}

// principalWorkspace is the principal's own directory under the capsule
// workspace, created 0700 on first use, so principals never share files.
// The owner-fallback gets ".owner", a name no principal can have. With
// owner set (a user-namespaced sandbox, whose processes are not host
// root), the directory is given to that uid:gid, checked on every spawn
// so a policy change (a reload onto another profile) takes effect.
func principalWorkspace(root string, o owner, own *Owner) (string, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("%w: workspace %q: %v", ErrUnavailable, root, err)
	}
	name := o.principal
	if o.fallback {
		name = ".owner"
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("%w: principal workspace: %v", ErrUnavailable, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("%w: principal workspace: %v", ErrUnavailable, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: principal workspace is not a directory (symlink?)", ErrBoundaryEscape)
	}
	if own != nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != own.UID || int(st.Gid) != own.GID {
			// Lchown: dir was just checked to be no symlink, and its
			// parent is the host's (0700), so nothing swaps it meanwhile.
			if err := os.Lchown(dir, own.UID, own.GID); err != nil {
				return "", fmt.Errorf("%w: principal workspace: giving it to the sandbox's uid %d: %v", ErrUnavailable, own.UID, err)
			}
		}
	}
	return dir, nil
}

func validLabel(l string) error {
	if len(l) > maxLabelBytes {
		return fmt.Errorf("%w: label is %d bytes (max %d)", ErrInvalidInput, len(l), maxLabelBytes)
	}
	if !utf8.ValidString(l) {
		return fmt.Errorf("%w: label is not valid UTF-8", ErrInvalidInput)
	}
	for _, c := range l {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return fmt.Errorf("%w: label contains control character %U", ErrInvalidInput, c)
		}
	}
	return nil
}

// deriveLabel is the label when none is given: the command's base name,
// cleaned to fit the label rules.
func deriveLabel(cmd string) string {
	b := []rune(filepath.Base(cmd))
	out := make([]rune, 0, len(b))
	n := 0
	for _, c := range b {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == utf8.RuneError {
			continue
		}
		if n+utf8.RuneLen(c) > maxLabelBytes {
			break
		}
		n += utf8.RuneLen(c)
		out = append(out, c)
	}
	return string(out)
}

// reserve takes the quotas atomically, before anything starts, and
// registers p as starting. Every failure after it must call unreserve.
func (r *Registry) reserve(o owner, pr *prepared) (*proc, error) {
	p := &proc{
		own:        o,
		persistent: pr.persist != nil,
		label:      pr.label,
		command:    pr.command,
		args:       argsOf(pr.spec.Argv),
		backend:    pr.backend,
		overflow:   pr.spec.Output.Overflow,
		cs:         pr.cs,
		stdinSem:   make(chan struct{}, 1),
		rearm:      make(chan struct{}, 1),
	}
	d := r.cfg.Defaults
	p.maxLifetime, p.idle, p.retention = d.MaxLifetime, d.IdleTimeout, d.ExitRetention
	p.keepStdin = pr.spec.Stdin.Mode == sandbox.StdinOpen
	if po := pr.persist; po != nil {
		if po.MaxLifetime != nil {
			p.maxLifetime = min(*po.MaxLifetime, d.MaxLifetime)
		}
		if po.IdleTimeout != nil {
			p.idle = min(*po.IdleTimeout, d.MaxLifetime)
		}
		if po.ExitRetention != nil {
			p.retention = min(*po.ExitRetention, exitRetentionCeil)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("%w: registry is shut down", ErrUnavailable)
	}
	if r.capsules[o.capsule] != pr.cs {
		return nil, fmt.Errorf("%w: capsule %q was removed", ErrUnavailable, o.capsule)
	}
	sc := r.scopeLocked(o)
	if err := r.checkRoomLocked(o, pr, sc); err != nil {
		return nil, err
	}
	// An ID for both tiers: ephemeral ones are never published, but give
	// log lines a correlating short hash.
	for i := 0; ; i++ {
		id, err := newRawID()
		if err != nil {
			return nil, err
		}
		k := r.keyOf(id)
		if _, dup := r.byKey[k]; !dup {
			if _, dup = r.tombs[k]; !dup {
				p.id, p.key = id, k
				break
			}
		}
		if i == 8 {
			return nil, fmt.Errorf("%w: could not draw a unique process ID", ErrInternal)
		}
	}
	if !p.persistent {
		p.id = ""
	}
	sc.running++
	r.running++
	if p.persistent {
		sc.retained++
		pr.cs.entries++
	}
	p.sc = sc
	r.all[p] = struct{}{}
	r.inflight.Add(1)
	return p, nil
}

// checkRoomLocked is reserve's refusal: the node's capacity, the scope's
// quotas, the capsule's entries.
func (r *Registry) checkRoomLocked(o owner, pr *prepared, sc *scope) error {
	if c := r.cfg.NodeCapacity; c > 0 && r.running >= c {
		return fmt.Errorf("%w: node %q runs %d of %d processes", ErrNodeFull, r.dir.Node(), r.running, c)
	}
	q := r.quotasFor(&pr.cs.policy)
	if sc.running >= q.MaxConcurrent {
		return fmt.Errorf("%w: %d of %d concurrent processes of this principal are running", ErrQuota, sc.running, q.MaxConcurrent)
	}
	if pr.persist == nil {
		return nil
	}
	if sc.retained >= q.MaxRetained {
		return fmt.Errorf("%w: %d of %d retained process IDs of this principal are in use; release exited processes", ErrRegistryFull, sc.retained, q.MaxRetained)
	}
	if pr.cs.entries >= q.MaxEntries {
		return fmt.Errorf("%w: capsule %q holds %d of %d process entries", ErrRegistryFull, o.capsule, pr.cs.entries, q.MaxEntries)
	}
	return nil
}

// unreserve undoes reserve for a process that never started.
func (r *Registry) unreserveLocked(p *proc) {
	delete(r.all, p)
	p.forgotten = true
	p.exited = true // its slots are returned here: recordExit must not return them again
	p.sc.running--
	r.running--
	if p.persistent {
		p.sc.retained--
		p.cs.entries--
	}
}

// start runs the reserved process and publishes it. On any failure the
// reservation is released and nothing is left running.
func (r *Registry) start(ctx context.Context, p *proc, pr *prepared) error {
	defer r.inflight.Done()
	h, err := pr.backend.Start(ctx, pr.spec)
	if err != nil {
		r.mu.Lock()
		r.unreserveLocked(p)
		r.mu.Unlock()
		r.dirRelease(p, holdAll)
		err = mapSandboxErr("spawn "+pr.command, err)
		r.log.Info("spawn failed", append(p.attrs(), "cmd", pr.spec.Argv[0], "err", err)...)
		return err
	}
	now := r.now()
	if p.persistent {
		crashAt(crashStarted)
	}
	if err := r.journalSpawn(p, pr, h.Ref(), now); err != nil {
		r.abandon(p, h)
		r.log.Warn("spawn not journaled: process killed", append(p.attrs(), "err", err)...)
		return err
	}
	if p.persistent {
		crashAt(crashJournaled)
	}
	p.term = r.startTerminal(p, h, pr.spec.Terminal, nil, false) // before p is published
	r.mu.Lock()
	if r.closed || p.reasonSet {
		r.mu.Unlock()
		r.abandon(p, h)
		return fmt.Errorf("%w: the capsule or principal was removed while the process started", ErrUnavailable)
	}
	p.h, p.started, p.lastTouch, p.touchedJr = h, now, now, now
	if p.persistent {
		r.byKey[p.key] = p
	}
	r.workers.Add(1)
	r.mu.Unlock()
	r.startWatch(p)
	tier := "background"
	if p.persistent {
		tier = "persistent"
	}
	r.log.Info("process spawned", append(p.attrs(), "tier", tier, "cmd", pr.spec.Argv[0], "label", p.label)...)
	return nil
}

// abandon kills a process that was started but is not published (its
// capsule was removed, the registry shut down, or its spawn could not be
// journaled), releases its reservation and cleans up after it.
func (r *Registry) abandon(p *proc, h sandbox.Handle) {
	r.mu.Lock()
	r.unreserveLocked(p)
	p.h = h
	r.mu.Unlock()
	r.dirRelease(p, holdAll)
	fctx, cancel := context.WithTimeout(context.Background(), forceTerminateBound+r.cfg.Defaults.Drain)
	h.Terminate(fctx, sandbox.Force)
	cancel()
	r.cleanup(p)
}

// Spawn runs a process to completion (bounded by req.Timeout, clamped to
// Defaults.SpawnTimeout). On timeout the tree is killed and the partial
// output is returned with the signal exit.
func (r *Registry) Spawn(ctx context.Context, req SpawnRequest) (Result, error) {
	o, err := r.caller(ctx)
	if err != nil {
		return Result{}, err
	}
	timeout := r.cfg.Defaults.SpawnTimeout
	if req.Timeout != nil {
		if *req.Timeout <= 0 {
			return Result{}, fmt.Errorf("%w: timeout-ms must be > 0", ErrInvalidInput)
		}
		timeout = min(timeout, *req.Timeout)
	}
	pr, err := r.prepare(o, req, nil, false)
	if err != nil {
		return Result{}, err
	}
	p, err := r.reserveIn(ctx, o, pr)
	if err != nil {
		return Result{}, err
	}
	if err := r.start(ctx, p, pr); err != nil {
		return Result{}, err
	}
	defer r.forget(p)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.h.Done():
	case <-t.C:
		r.mu.Lock()
		r.claimLocked(p, ReasonKilled)
		r.mu.Unlock()
		r.terminate(ctx, p, 0)
	case <-ctx.Done():
		r.terminate(ctx, p, 0)
		r.recordExit(p)
		return Result{}, ctxErr(ctx, "spawn")
	}
	r.recordExit(p)
	res := Result{}
	var tr1, tr2 bool
	res.Stdout, tr1 = readAll(p.h.Stdout(), r.cfg.Defaults.ReadMax)
	res.Stderr, tr2 = readAll(p.h.Stderr(), r.cfg.Defaults.ReadMax)
	res.Truncated = tr1 || tr2
	r.mu.Lock()
	res.Exit = p.exit
	r.mu.Unlock()
	return res, nil
}

// readAll reads a stream from its start, up to max bytes; truncated
// reports any byte not returned (dropped, or beyond max).
func readAll(l sandbox.Log, max int) ([]byte, bool) {
	var out []byte
	var off, dropped int64
	for len(out) < max {
		c, err := l.ReadFrom(off, min(max-len(out), 1<<20))
		if err != nil {
			return out, true
		}
		dropped += c.Dropped
		out = append(out, c.Data...)
		off = c.Next
		if len(c.Data) == 0 {
			break
		}
	}
	return out, dropped > 0 || off < l.End()
}

// SpawnBackground starts an ephemeral process owned by the returned
// handle: dropping the handle kills and reaps it.
func (r *Registry) SpawnBackground(ctx context.Context, req SpawnRequest) (*Handle, error) {
	o, err := r.caller(ctx)
	if err != nil {
		return nil, err
	}
	pr, err := r.prepare(o, req, nil, true)
	if err != nil {
		return nil, err
	}
	p, err := r.reserveIn(ctx, o, pr)
	if err != nil {
		return nil, err
	}
	if err := r.start(ctx, p, pr); err != nil {
		return nil, err
	}
	return &Handle{r: r, p: p, own: o}, nil
}

// SpawnPersistent starts a process in the registry of the caller's
// (capsule, principal) and returns its ID. Quotas are reserved before
// anything starts.
func (r *Registry) SpawnPersistent(ctx context.Context, req SpawnRequest, o PersistOptions) (string, error) {
	own, err := r.caller(ctx)
	if err != nil {
		return "", err
	}
	pr, err := r.prepare(own, req, &o, false)
	if err != nil {
		return "", err
	}
	if id, placed, err := r.spawnPlaced(ctx, req, o); placed {
		return id, err
	}
	p, err := r.reserveIn(ctx, own, pr)
	if err != nil {
		return "", err
	}
	crashAt(crashReserved)
	if err := r.start(ctx, p, pr); err != nil {
		return "", err
	}
	crashAt(crashPublished)
	return p.id, nil
}

// argsOf is argv without the command.
func argsOf(argv []string) []string {
	if len(argv) < 2 {
		return nil
	}
	return slices.Clone(argv[1:])
}

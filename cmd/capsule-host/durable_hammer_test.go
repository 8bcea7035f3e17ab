//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/internal/procfs"
)

// The hammer's shape: 32 workers over 4 principals against 10 restarts.
const (
	hammerWorkers    = 32
	hammerPrincipals = 4
	hammerRestarts   = 10
	// The shell capsule's quota comes from the host config; testcap's
	// manifest lowers it to a small cap its 4 workers per principal
	// contend for, so spawns meet typed quota errors.
	hammerShellConc = 8
	hammerTcConc    = 3
	hammerTcRetain  = 8
)

// TestDurableHammer is the hammer test on the built binary: 32
// goroutines of mixed calls (persistent spawns through the shell capsule
// and a bwrap copy of testcap, reads with cursors, stdin writes, signals,
// waits, stops, releases, lists, event polls; 4 principals; a small testcap
// quota) while serve (on_shutdown keep) is killed and restarted 10 times
// (kill -9, twice SIGTERM). A call that fails in a restart window fails
// with a connection error, shutting-down, cancelled or the typed
// unavailable, never with a wrong answer: no gap in a counter's output
// without a counted loss, no confirmed stdin write missing, no process or
// event of another principal, no ID of the test's pointing nowhere, no
// event sequence going back. A spawn whose answer was lost is resolved by
// listing its label once a daemon answers (adopted, or ended as an
// unjournaled orphan). At the end every list equals what the test believes,
// the live processes under /proc are exactly the listed running ones, each
// principal can spawn exactly up to its cap, the keeper's sockets, other
// fds and threads did not grow from restart 1 to restart 10, neither did
// the daemon's goroutines and descriptors, nor while one daemon served the hammer (checkDaemonGrowth),
// and after a graceful stop nothing of the test runs.
func TestDurableHammer(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	dir := t.TempDir()
	tc := hammerTestcap(t)
	cfg := fmt.Sprintf("capsules = [%q]\nshutdown_grace = \"1s\"\n[quotas]\nmax_concurrent = %d\nmax_retained = 64\nmax_entries = 1024\n[processes]\non_shutdown = \"keep\"\n",
		tc, hammerShellConc)
	if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("hammer-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		stopMarked(t, mark)
		stopMarked(t, dir) // daemons, the keeper and sandboxes name the test's directory
	})
	h := &hammer{t: t, c: api.NewUnix(filepath.Join(dir, "d.sock")), mark: mark, stop: make(chan struct{}),
		procs: map[string]*hproc{}, owner: map[string]string{}}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			if len(b) > 64<<10 {
				b = b[len(b)-64<<10:]
			}
			t.Logf("daemon log (tail):\n%s", b)
		}
	})
	start := time.Now()
	d := startServe(t, bin, dir)
	awaitServing(t, h.c, d)
	var wg sync.WaitGroup
	for w := range hammerWorkers {
		wg.Add(1)
		go func() { defer wg.Done(); h.worker(w) }()
	}
	finished := false
	defer func() { // a Fatal: end the workers before the cleanups kill the daemon
		if !finished {
			h.aborted.Store(true)
			h.endWorkers()
			waitGroupWithin(&wg, 60*time.Second)
		}
	}()
	var first, last keeperCount
	var dm [4]daemonCount // after restart 1, before restart 2, after restart 10, at the end
	var ups []string      // exec of serve to its first answer, per restart
	for i := 1; i <= hammerRestarts; i++ {
		h.awaitAnswers()
		if i == 2 {
			dm[1] = h.measureDaemon(d) // the daemon of restart 1, after serving the hammer
		}
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond) // the hammering while this daemon serves
		down := time.Now()
		if i == 4 || i == 8 {
			d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("restart %d: serve did not exit within 60 s of SIGTERM", i)
			}
			if d.err != nil {
				t.Fatalf("restart %d: serve exited with %v after SIGTERM", i, d.err)
			}
		} else {
			d.cmd.Process.Signal(syscall.SIGKILL)
			<-d.exited
		}
		var args []string
		if i == hammerRestarts {
			args = []string{"--on-shutdown", "stop"} // the graceful end stops everything
		}
		d = startServe(t, bin, dir, args...)
		stopped := time.Since(down)
		up := awaitServing(t, h.c, d)
		ups = append(ups, fmt.Sprintf("%v+%v", stopped.Round(time.Millisecond), up.Round(time.Millisecond)))
		switch i {
		case 1:
			first = h.measureKeeper(dir)
			dm[0] = h.measureDaemon(d)
		case hammerRestarts:
			last = h.measureKeeper(dir)
			dm[2] = h.measureDaemon(d)
		}
	}
	t.Logf("%v: restarts done, keeper measured", time.Since(start).Round(time.Millisecond))
	h.endWorkers()
	if !waitGroupWithin(&wg, 120*time.Second) {
		t.Fatal("the workers did not finish within 120 s of the last restart")
	}
	finished = true
	dm[3] = h.measureDaemon(d) // the last daemon, after serving the workers' last calls
	t.Logf("after %d restarts in %v: %s", hammerRestarts, time.Since(start).Round(time.Millisecond), h.stats.String())
	t.Logf("per restart, the old serve's end + exec of the new one to its first answer: %s", strings.Join(ups, " "))
	t.Logf("keeper after restart 1: %+v; after restart %d: %+v", first, hammerRestarts, last)
	t.Logf("daemon after restart 1: %+v; before restart 2: %+v; after restart %d: %+v; at the end: %+v", dm[0], dm[1], hammerRestarts, dm[2], dm[3])
	if t.Failed() {
		return
	}
	h.checkBelief()
	h.checkAlive()
	h.checkQuotas()
	checkKeeperGrowth(t, first, last)
	checkDaemonGrowth(t, dm)
	t.Logf("%v: lists, /proc and quotas checked", time.Since(start).Round(time.Millisecond))
	endServe(t, d)
	if d.err != nil {
		t.Errorf("the last serve exited with %v after SIGTERM", d.err)
	}
	waitNoMarked(t, mark, 30*time.Second)
	waitNoMarked(t, dir, 30*time.Second) // no keeper, no daemon, no sandbox
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// hammerTestcap is a copy of testcap that runs its processes under bwrap
// (one keeper for both capsules, the test daemons' default backend;
// warming one instance: each restart warms less) with the small quota.
func hammerTestcap(t *testing.T) string {
	t.Helper()
	dst := bwrapTestcap(t)
	f, err := os.OpenFile(filepath.Join(dst, "Capsule.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "\n[limits]\nmax_concurrent = %d\nmax_retained = %d\n", hammerTcConc, hammerTcRetain); err != nil {
		t.Fatal(err)
	}
	return dst
}

func waitGroupWithin(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// hammer is the test's shared state: what it believes exists.
type hammer struct {
	t    *testing.T
	c    *api.Client
	mark string
	stop chan struct{} // closed by endWorkers: the workers finish up
	// aborted: the test is ending early; retries give up at once.
	aborted atomic.Bool
	stopped sync.Once
	// gate: every call holds it shared; a measurement holds it alone,
	// so the keeper is measured with no call in flight.
	gate sync.RWMutex

	mu    sync.Mutex
	procs map[string]*hproc // every process the test holds an ID of
	owner map[string]string // every ID ever answered: "capsule/principal"
	fails atomic.Int32
	stats hammerStats
}

type hproc struct {
	capsule, principal, label string
	running                   bool
}

type hammerStats struct {
	calls, transient, answered, quota, resolvedAdopted, resolvedGone, events, crossChecks atomic.Int64
}

func (s *hammerStats) String() string {
	return fmt.Sprintf("%d calls, %d failed in a restart window, %d quota or registry-full, lost spawn answers: %d adopted %d ended; %d events; %d cross-principal checks; %d gaps with counted loss",
		s.calls.Load(), s.transient.Load(), s.quota.Load(), s.resolvedAdopted.Load(), s.resolvedGone.Load(), s.events.Load(), s.crossChecks.Load(), hammerGapsWithLoss.Load())
}

// fail records a wrong answer (the first 30 of them).
func (h *hammer) fail(format string, args ...any) {
	if h.fails.Add(1) <= 30 {
		h.t.Errorf(format, args...)
	}
}

// awaitAnswers lets the daemon serve until it has answered a call per
// worker (bounded: 30 s); the test then waits 0.3-1 s more before the
// next kill: on a loaded machine calls are slow, and a fixed window could
// cut every one of them off.
func (h *hammer) awaitAnswers() {
	want := h.stats.answered.Load() + hammerWorkers
	for end := time.Now().Add(30 * time.Second); h.stats.answered.Load() < want && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *hammer) endWorkers() { h.stopped.Do(func() { close(h.stop) }) }

func (h *hammer) live() bool {
	select {
	case <-h.stop:
		return false
	default:
		return h.fails.Load() == 0
	}
}

func (h *hammer) believe(id, capsule, principal, label string, running bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.procs[id] = &hproc{capsule: capsule, principal: principal, label: label, running: running}
	h.owner[id] = capsule + "/" + principal
}

func (h *hammer) setRunning(id string, running bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.procs[id]; p != nil {
		p.running = running
	}
}

func (h *hammer) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.procs, id)
}

func (h *hammer) ownerOf(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner[id]
}

// label names one spawn: the test's marker, the principal, the worker and
// a sequence number. It is in the command line too, so /proc shows it.
func (h *hammer) label(p string, w, n int) string {
	return fmt.Sprintf("%s-%s-w%d-%d", h.mark, p, w, n)
}

// call makes one tool call. transient is true for the failures a restart
// window may cause: the daemon unreachable (refused, no socket, the
// answer's head or body cut off), shutting-down, cancelled (SIGTERM's grace ended), and a testcap
// result with the typed error unavailable. Any other failure of the call
// is a wrong answer. code is a testcap result's error code; for the shell
// capsule it is "no-such-process" or "tool-error: " and the message (the
// text is for messages only).
func (h *hammer) call(capsule, tool, principal string, in any) (m map[string]any, code string, transient bool) {
	b, _ := json.Marshal(in)
	h.gate.RLock()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	res, err := h.c.Call(ctx, api.CallRequest{Capsule: capsule, Tool: tool, Input: b, Principal: principal})
	cancel()
	h.gate.RUnlock()
	h.stats.calls.Add(1)
	var ae *api.Error
	switch {
	case err == nil:
	case errors.Is(err, api.ErrUnreachable),
		errors.Is(err, io.ErrUnexpectedEOF), // the answer's body cut off by a kill -9
		errors.As(err, &ae) && (ae.Code == api.CodeShuttingDown || ae.Code == api.CodeCancelled || ae.Code == api.CodeLoading):
		h.stats.transient.Add(1)
		return nil, "", true
	case errors.As(err, &ae) && ae.Code == api.CodeToolError && capsule == "shell" && ae.ToolCode == api.CodeNoSuchProcess:
		return nil, api.CodeNoSuchProcess, false // the tool's typed code
	case errors.As(err, &ae) && ae.Code == api.CodeToolError && capsule == "shell":
		return nil, "tool-error: " + ae.Message, false // the caller decides (the probe's quota)
	default:
		h.fail("%s %s as %s: %v (not an error of a restart window)", capsule, tool, principal, err)
		return nil, "failed", false
	}
	h.stats.answered.Add(1)
	m = map[string]any{}
	if err := json.Unmarshal(res.Output, &m); err != nil {
		h.fail("%s %s: output %s", capsule, tool, res.Output)
		return nil, "failed", false
	}
	if e, ok := m["error"].(map[string]any); ok {
		code, _ = e["code"].(string)
		if code == "unavailable" {
			h.stats.transient.Add(1)
			return nil, "", true
		}
		return m, code, false
	}
	return m, "", false
}

// retry calls until the answer is not transient, bounded; ok is false
// when the bound passed (a failure) or a wrong answer was recorded.
func (h *hammer) retry(capsule, tool, principal string, in any) (m map[string]any, code string, ok bool) {
	for end := time.Now().Add(150 * time.Second); time.Now().Before(end) && h.fails.Load() == 0 && !h.aborted.Load(); {
		m, code, tr := h.call(capsule, tool, principal, in)
		if !tr {
			return m, code, code != "failed"
		}
		time.Sleep(50 * time.Millisecond) // the daemon is restarting: pace the retries
	}
	if h.fails.Load() == 0 && !h.aborted.Load() {
		h.fail("%s %s as %s: no daemon answered within 150 s", capsule, tool, principal)
	}
	return nil, "", false
}

// listed is one entry of a list, for either capsule.
type listed struct {
	id, label string
	running   bool
}

// list lists a principal's processes of capsule (retrying through
// restarts) and checks that every entry is the principal's: its label
// names the principal and its ID is not one answered to someone else.
func (h *hammer) list(capsule, p string) ([]listed, bool) {
	m, code, ok := h.retry(capsule, "list_processes", p, map[string]any{})
	if !ok || code != "" {
		if ok {
			h.fail("%s list as %s: %s", capsule, p, code)
		}
		return nil, false
	}
	var raw []any
	if capsule == "shell" {
		raw, _ = m["processes"].([]any)
	} else {
		raw, _ = m["ok"].([]any)
	}
	var out []listed
	for _, e := range raw {
		em, _ := e.(map[string]any)
		l := listed{}
		l.id, _ = em["id"].(string)
		l.label, _ = em["label"].(string)
		if capsule == "shell" {
			l.running, _ = em["running"].(bool)
		} else {
			l.running = em["phase"] != "exited"
		}
		if !strings.Contains(l.label, "-"+p+"-") {
			h.fail("%s list as %s: entry %q of another principal", capsule, p, l.label)
		}
		if o := h.ownerOf(l.id); o != "" && o != capsule+"/"+p {
			h.fail("%s list as %s: ID of %s", capsule, p, o)
		}
		out = append(out, l)
	}
	return out, true
}

// spawn starts a process labelled label and returns its ID. A spawn whose
// answer a restart cut off is resolved by listing: the label is there
// (it was journaled: adopted) or not (the next daemon ended it as an
// orphan), and the test believes exactly that. code is a non-transient
// error code (quota, ...).
func (h *hammer) spawn(capsule, p, label, tool string, in any) (id, code string, ok bool) {
	m, code, tr := h.call(capsule, tool, p, in)
	if !tr {
		if code != "" {
			return "", code, false
		}
		if capsule == "shell" {
			id, _ = m["id"].(string)
		} else {
			id, _ = m["ok"].(string)
		}
		if id == "" {
			h.fail("%s %s as %s: no ID in %v", capsule, tool, p, m)
			return "", "failed", false
		}
		h.believe(id, capsule, p, label, true)
		return id, "", true
	}
	ls, lok := h.list(capsule, p)
	if !lok {
		return "", "failed", false
	}
	for _, l := range ls {
		if l.label == label {
			h.stats.resolvedAdopted.Add(1)
			h.believe(l.id, capsule, p, label, l.running)
			return l.id, "", true
		}
	}
	h.stats.resolvedGone.Add(1)
	return "", "lost", false
}

func (h *hammer) worker(w int) {
	p := fmt.Sprintf("p%d", w%hammerPrincipals)
	switch {
	case w < 8:
		h.counterWorker(w, p)
	case w < 16:
		h.catWorker(w, p)
	default:
		h.lifecycleWorker(w, p)
	}
}

// other is another principal than p.
func other(p string) string {
	n, _ := strconv.Atoi(strings.TrimPrefix(p, "p"))
	return fmt.Sprintf("p%d", (n+1)%hammerPrincipals)
}

// crossRead: another principal reading p's process gets no-such-process.
func (h *hammer) crossRead(capsule, p, id string) {
	o := other(p)
	var m map[string]any
	var code string
	var tr bool
	if capsule == "shell" {
		m, code, tr = h.call("shell", "read_process_logs", o, map[string]any{"id": id})
	} else {
		m, code, tr = h.call("testcap", "status", o, map[string]any{"id": id})
	}
	if tr || code == "failed" {
		return
	}
	h.stats.crossChecks.Add(1)
	if code != "no-such-process" {
		h.fail("%s: %s reached %s's process: %q %v", capsule, o, p, code, m)
	}
}

// counterWorker follows a counter through the shell capsule with a
// cursor: every line follows the last, unless the read counts a loss.
// Now and then it kills the counter and starts another.
func (h *hammer) counterWorker(w int, p string) {
	for n := 0; h.live(); n++ {
		label := h.label(p, w, n)
		cmd := fmt.Sprintf(`i=0; while true; do i=$((i+1)); echo "%s $i"; sleep 0.1; done`, label)
		id, code, ok := h.spawn("shell", p, label, "spawn_background_process", map[string]any{"command": cmd, "label": label})
		if !ok {
			if code != "lost" && code != "failed" {
				h.fail("shell spawn as %s: %s (below its quota)", p, code)
			}
			continue
		}
		f := &follower{label: label}
		for reads := 0; h.live() && (n >= 3 || reads < 40); reads++ {
			m, code, tr := h.call("shell", "read_process_logs", p, map[string]any{"id": id, "stream": "stdout", "cursor": f.cursor})
			if tr {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if code != "" {
				h.fail("shell read of its own counter as %s: %s", p, code)
				return
			}
			if err := f.next(m, func(n int) bool { return n == f.last+1 }); err != nil {
				h.fail("counter %s: %v", label, err)
				return
			}
			switch reads % 16 {
			case 5:
				h.crossRead("shell", p, id)
			case 11:
				h.list("shell", p)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !h.live() {
			return
		}
		h.kill(p, id)
	}
}

// kill stops a shell process; a kill cut off is resolved by listing.
func (h *hammer) kill(p, id string) {
	for h.fails.Load() == 0 && !h.aborted.Load() {
		m, code, tr := h.call("shell", "kill_process", p, map[string]any{"id": id, "grace_ms": 0})
		if !tr {
			if code != "" || m["running"] != false {
				h.fail("shell kill as %s: %q %v", p, code, m)
			}
			h.setRunning(id, false)
			return
		}
		ls, ok := h.list("shell", p)
		if !ok {
			return
		}
		for _, l := range ls {
			if l.id == id && !l.running {
				h.setRunning(id, false)
				return
			}
		}
	}
}

// follower reads one stream with a cursor and checks its lines.
type follower struct {
	label, cursor, tail string
	last                int
}

// next takes one read's answer: complete lines must be "label N" and
// each N must satisfy want, unless the read counts dropped bytes.
func (f *follower) next(m map[string]any, want func(int) bool) error {
	text, _ := m["stdout"].(string)
	dropped, _ := m["bytes_dropped"].(float64)
	cur, _ := m["cursor"].(string)
	if cur == "" {
		return fmt.Errorf("a read answered no cursor: %v", m)
	}
	f.cursor = cur
	text = f.tail + text
	i := strings.LastIndexByte(text, '\n')
	f.tail = text[i+1:]
	if i < 0 {
		return nil
	}
	for _, ln := range strings.Split(text[:i], "\n") {
		s, ok := strings.CutPrefix(ln, f.label+" ")
		n, err := strconv.Atoi(s)
		if !ok || err != nil {
			return fmt.Errorf("line %q is not %q N", ln, f.label)
		}
		if !want(n) {
			if dropped == 0 {
				return fmt.Errorf("line %q after %d, with no loss counted (a gap or a repeat)", ln, f.last)
			}
			hammerGapsWithLoss.Add(1)
		}
		f.last = n
	}
	return nil
}

// hammerGapsWithLoss counts gaps a read explained by dropped bytes.
var hammerGapsWithLoss atomic.Int64

// catWorker writes numbered lines to a cat's stdin and reads the echo
// with a cursor: the numbers rise, and none whose write was confirmed is
// missing (one whose write a restart cut off may or may not be there).
// Between writes it runs a short command and waits for it.
func (h *hammer) catWorker(w int, p string) {
	label := h.label(p, w, 0)
	var id string
	for h.live() {
		var code string
		var ok bool
		if id, code, ok = h.spawn("shell", p, label, "spawn_background_process",
			map[string]any{"command": "cat; : " + label, "label": label, "keep_stdin_open": true}); ok {
			break
		}
		if code != "lost" && code != "failed" {
			h.fail("shell spawn of cat as %s: %s (below its quota)", p, code)
			return
		}
	}
	if id == "" {
		return
	}
	f := &follower{label: label}
	confirmed := map[int]bool{}
	check := func(m map[string]any) bool {
		err := f.next(m, func(n int) bool {
			for k := f.last + 1; k < n; k++ {
				if confirmed[k] {
					return false
				}
			}
			return n > f.last
		})
		if err != nil {
			h.fail("cat %s: %v", label, err)
		}
		return err == nil
	}
	k := 0
	for h.live() {
		k++
		_, code, tr := h.call("shell", "write_process_stdin", p, map[string]any{"id": id, "data": fmt.Sprintf("%s %d\n", label, k)})
		if !tr && code != "" {
			h.fail("cat %s: write %d: %s", label, k, code)
			return
		}
		confirmed[k] = !tr
		m, code, tr := h.call("shell", "read_process_logs", p, map[string]any{"id": id, "stream": "stdout", "cursor": f.cursor})
		if !tr && (code != "" || !check(m)) {
			if code != "" {
				h.fail("cat %s: read: %s", label, code)
			}
			return
		}
		if k%6 == 0 {
			h.runShort(p, fmt.Sprintf("%s-run-%d", label, k))
		}
		if k%9 == 0 {
			h.crossRead("shell", p, id)
		}
	}
	// The end: every confirmed write shows up.
	want := 0
	for j := range k + 1 {
		if confirmed[j] {
			want = j
		}
	}
	for end := time.Now().Add(30 * time.Second); f.last < want && h.fails.Load() == 0 && !h.aborted.Load(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			h.fail("cat %s: confirmed write %d never echoed (last %d)", label, want, f.last)
			return
		}
		m, code, ok := h.retry("shell", "read_process_logs", p, map[string]any{"id": id, "stream": "stdout", "cursor": f.cursor})
		if !ok || code != "" || !check(m) {
			if ok && code != "" {
				h.fail("cat %s: read: %s", label, code)
			}
			return
		}
	}
}

// runShort runs a quick command and waits for it (run_shell_command):
// its exit and its whole output come back, and it is released. One cut
// off by a restart is resolved by its label (the command).
func (h *hammer) runShort(p, word string) {
	cmd := "echo " + word
	m, code, tr := h.call("shell", "run_shell_command", p, map[string]any{"command": cmd, "yield_ms": 10000})
	if tr {
		if ls, ok := h.list("shell", p); ok {
			for _, l := range ls {
				if l.label == cmd { // journaled before the cut: kept, exited or not
					h.believe(l.id, "shell", p, cmd, l.running)
					h.stats.resolvedAdopted.Add(1)
				}
			}
		}
		return
	}
	ex, _ := m["exit"].(map[string]any)
	if code != "" || m["running"] != false || m["stdout"] != word+"\n" || ex["exit_code"] != float64(0) {
		h.fail("run_shell_command %q as %s: %q %v", cmd, p, code, m)
	}
}

// lifecycleWorker drives testcap's process functions on its own
// processes: spawn (meeting the quota), status, wait, signal or stop,
// release, and polls the principal's events in between.
func (h *hammer) lifecycleWorker(w int, p string) {
	var cursor float64
	for n := 0; h.live(); n++ {
		h.pollEvents(p, &cursor)
		label := h.label(p, w, n)
		req := map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "while :; do sleep 0.2; done; : " + label}}
		id, code, ok := h.spawn("testcap", p, label, "spawn_persistent", map[string]any{"request": req, "options": map[string]any{"label": label}})
		switch {
		case !ok && (code == "quota" || code == "registry-full"):
			h.stats.quota.Add(1)
			time.Sleep(50 * time.Millisecond) // let another worker free a slot
			continue
		case !ok && (code == "lost" || code == "failed"):
			continue
		case !ok:
			h.fail("testcap spawn as %s: %s", p, code)
			return
		}
		if !h.lifecycle(p, id, label, n) {
			return
		}
	}
}

// lifecycle takes one running testcap process to its release.
func (h *hammer) lifecycle(p, id, label string, n int) bool {
	m, code, ok := h.retry("testcap", "status", p, map[string]any{"id": id})
	st, _ := m["ok"].(map[string]any)
	if !ok || code != "" || st["label"] != label {
		return ok && h.failf("testcap status of its own %s as %s: %q %v", label, p, code, m)
	}
	h.crossRead("testcap", p, id)
	if m, code, ok = h.retry("testcap", "wait", p, map[string]any{"id": id, "timeout_ms": 20}); !ok {
		return false
	}
	if code != "wait-timeout" && st["phase"] != "exited" {
		return h.failf("testcap wait(20 ms) of running %s: %q %v, want wait-timeout", label, code, m)
	}
	ends := [...]struct{ tool, sig string }{{"signal", "term"}, {"stop", ""}, {"signal", "kill"}}
	e := ends[n%len(ends)]
	if e.tool == "signal" {
		// A signal cut off by a restart may or may not have arrived: the
		// wait and stop below settle it either way.
		if _, code, tr := h.call("testcap", "signal", p, map[string]any{"id": id, "sig": e.sig}); !tr && code != "" {
			return h.failf("testcap signal %s of %s: %s", e.sig, label, code)
		}
		m, code, ok = h.retry("testcap", "wait", p, map[string]any{"id": id, "timeout_ms": 5000})
		if !ok || (code != "" && code != "wait-timeout") {
			return ok && h.failf("testcap wait of signalled %s: %q %v", label, code, m)
		}
		if ex, _ := m["ok"].(map[string]any); code == "" && ex["exit_code"] == float64(0) {
			return h.failf("testcap %s exited 0 after SIGTERM/SIGKILL: %v", label, m)
		}
	}
	if m, code, ok = h.retry("testcap", "stop", p, map[string]any{"id": id, "grace_ms": 0}); !ok || code != "" {
		return ok && h.failf("testcap stop of %s: %q %v", label, code, m)
	}
	if ex, _ := m["ok"].(map[string]any); ex["exit_code"] == float64(0) {
		return h.failf("testcap %s exited 0 while the test ended it: %v", label, m)
	}
	h.setRunning(id, false)
	h.pollEvents(p, new(float64))
	// A release cut off may have happened: no-such-process then.
	if _, code, ok = h.retry("testcap", "release", p, map[string]any{"id": id}); !ok || (code != "" && code != "no-such-process") {
		return ok && h.failf("testcap release of %s: %q", label, code)
	}
	h.forget(id)
	if _, code, ok = h.retry("testcap", "status", p, map[string]any{"id": id}); ok && code != "no-such-process" {
		return h.failf("testcap status of released %s: %q, want no-such-process", label, code)
	}
	return ok
}

// failf is fail returning false, for the lifecycle's early returns.
func (h *hammer) failf(format string, args ...any) bool {
	h.fail(format, args...)
	return false
}

// pollEvents reads the principal's testcap events from *cursor: sequence
// numbers rise and never go back across restarts, and every event is of a
// process of this principal.
func (h *hammer) pollEvents(p string, cursor *float64) {
	m, code, tr := h.call("testcap", "poll_events", p, map[string]any{"cursor": *cursor, "max": 64, "timeout_ms": 0})
	if tr || code == "failed" {
		return
	}
	b, _ := m["ok"].(map[string]any)
	if code != "" || b == nil {
		h.fail("testcap poll_events as %s: %q %v", p, code, m)
		return
	}
	next, _ := b["next"].(float64)
	evs, _ := b["events"].([]any)
	if next < *cursor {
		h.fail("testcap poll_events as %s from %v: next %v went back", p, *cursor, next)
	}
	prev := *cursor
	for _, e := range evs {
		em, _ := e.(map[string]any)
		seq, _ := em["seq"].(float64)
		if seq <= prev || seq > next {
			h.fail("testcap poll_events as %s from %v: seq %v after %v (next %v)", p, *cursor, seq, prev, next)
		}
		prev = seq
		if id, _ := em["id"].(string); id != "" {
			if o := h.ownerOf(id); o != "" && o != "testcap/"+p {
				h.fail("testcap poll_events as %s: an event of %s's process", p, o)
			}
		}
	}
	h.stats.events.Add(int64(len(evs)))
	*cursor = next
}

// checkBelief: with no call in flight, every principal's list equals
// what the test believes, ID by ID, running or not.
func (h *hammer) checkBelief() {
	h.t.Helper()
	for _, capsule := range []string{"shell", "testcap"} {
		for i := range hammerPrincipals {
			p := fmt.Sprintf("p%d", i)
			ls, ok := h.list(capsule, p)
			if !ok {
				return
			}
			seen := map[string]bool{}
			for _, l := range ls {
				seen[l.id] = true
				b := h.procs[l.id]
				switch {
				case b == nil:
					h.fail("%s %s lists %q, which the test never held (a spawn nobody owns)", capsule, p, l.label)
				case b.running != l.running:
					h.fail("%s %s lists %q running=%v, the test believes running=%v", capsule, p, l.label, l.running, b.running)
				}
			}
			for id, b := range h.procs {
				if b.capsule == capsule && b.principal == p && !seen[id] {
					h.fail("%s %s: %q is missing from the list (an ID that points nowhere)", capsule, p, b.label)
				}
			}
		}
	}
}

// checkAlive: the processes alive under /proc are exactly the running
// ones the test believes in (the sandboxed shells carry the marker).
func (h *hammer) checkAlive() {
	h.t.Helper()
	want := 0
	for _, b := range h.procs {
		if b.running {
			want++
		}
	}
	var alive []string
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		alive = shells(withMarker(h.mark))
		if len(alive) == want || time.Now().After(end) {
			break
		}
	}
	if len(alive) != want {
		h.fail("%d processes believed running, %d alive: %v", want, len(alive), alive)
	}
}

// checkQuotas: with the test's processes accounted for, each principal
// can start exactly its cap minus what runs (shell), and, after its
// testcap processes are stopped and released, exactly testcap's cap,
// then gets the typed quota error.
func (h *hammer) checkQuotas() {
	var wg sync.WaitGroup
	for i := range hammerPrincipals {
		wg.Add(1)
		go func() { defer wg.Done(); h.probeQuotas(fmt.Sprintf("p%d", i)) }()
	}
	wg.Wait()
}

func (h *hammer) probeQuotas(p string) {
	h.mu.Lock()
	mine := map[string]hproc{}
	for id, b := range h.procs {
		if b.principal == p {
			mine[id] = *b
		}
	}
	h.mu.Unlock()
	running := 0
	for id, b := range mine {
		switch {
		case b.capsule == "shell" && b.running:
			running++
		case b.capsule == "testcap":
			if _, code, ok := h.retry("testcap", "stop", p, map[string]any{"id": id, "grace_ms": 0}); !ok || code != "" {
				h.fail("testcap stop of %q: %q", b.label, code)
			}
			if _, code, ok := h.retry("testcap", "release", p, map[string]any{"id": id}); !ok || code != "" {
				h.fail("testcap release of %q: %q", b.label, code)
			}
			h.forget(id)
		}
	}
	started := 0
	for j := 0; j <= hammerShellConc; j++ {
		label := h.label(p, 99, j)
		_, code, _ := h.call("shell", "spawn_background_process", p, map[string]any{"command": "sleep 1000; : " + label, "label": label})
		if code != "" {
			break // the shell capsule's quota is a tool error
		}
		started++
	}
	if started != hammerShellConc-running {
		h.fail("shell %s: %d running, %d more started; want exactly %d (quota %d)", p, running, started, hammerShellConc-running, hammerShellConc)
	}
	for j := 0; j <= hammerTcConc; j++ {
		label := h.label(p, 98, j)
		req := map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "sleep 1000; : " + label}}
		_, code, _ := h.call("testcap", "spawn_persistent", p, map[string]any{"request": req, "options": map[string]any{"label": label}})
		switch {
		case j < hammerTcConc && code != "":
			h.fail("testcap %s: spawn %d of %d with nothing running: %q", p, j+1, hammerTcConc, code)
		case j == hammerTcConc && code != "quota":
			h.fail("testcap %s: spawn %d past the cap %d: %q, want quota", p, j+1, hammerTcConc, code)
		}
	}
}

// keeperCount is the keeper's descriptors by kind, threads and children.
type keeperCount struct {
	PID, Sockets, Pipes, PidFDs, ProcFiles, Cgroups, Other, Threads, Children int
	others                                                                    string // what the other descriptors are, for the message
}

// measureKeeper counts the keeper's fds and threads with no call in
// flight, once two readings 200 ms apart agree (bounded), and checks the
// per-process descriptors against the live children.
func (h *hammer) measureKeeper(dir string) keeperCount {
	h.t.Helper()
	start := time.Now()
	h.gate.Lock()
	defer h.gate.Unlock()
	var k, prev keeperCount
	for end := start.Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		k = countKeeper(h.t, dir)
		if k == prev || time.Now().After(end) {
			break
		}
		prev = k
	}
	h.t.Logf("keeper measured in %v (calls drained, two equal readings)", time.Since(start).Round(time.Millisecond))
	// Per live process the keeper holds one pidfd, at most its three
	// pipe ends (stdin, stdout, stderr) and its cgroup's stat file; a
	// settled process holds none of them.
	if k.PidFDs > k.Children || k.Pipes > 3*k.Children || k.Cgroups > k.Children {
		h.fail("keeper descriptors beyond its %d live processes: %+v", k.Children, k)
	}
	return k
}

func countKeeper(t *testing.T, dir string) keeperCount {
	t.Helper()
	lock := keeperLock(dir)
	b, err := os.ReadFile(lock)
	if err != nil {
		t.Fatalf("keeper lock: %v", err)
	}
	k := keeperCount{}
	k.PID, _ = strconv.Atoi(strings.Fields(string(b))[0])
	procs := filepath.Join(filepath.Dir(lock), "procs") + "/"
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", k.PID))
	if err != nil {
		t.Fatalf("keeper fds: %v", err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", k.PID, fd.Name()))
		switch {
		case err != nil:
		case strings.HasPrefix(l, "socket:"):
			k.Sockets++
		case strings.HasPrefix(l, "pipe:"):
			k.Pipes++
		case l == "anon_inode:[pidfd]":
			k.PidFDs++
		case strings.HasPrefix(l, procs):
			k.ProcFiles++
		case strings.HasPrefix(l, "/sys/fs/cgroup/") && strings.Contains(l, "/capsule-host/"):
			k.Cgroups++ // a process's own cgroup
		default:
			k.Other++
			k.others += " " + l
		}
	}
	fp, err := procfs.ReadFootprint(k.PID)
	if err != nil {
		t.Fatalf("keeper footprint: %v", err)
	}
	k.Threads = fp.Threads
	pids, _ := procfs.PIDs()
	for _, pid := range pids {
		if st, err := procfs.ReadStat(pid); err == nil && st.PPID == k.PID && !st.Zombie() {
			k.Children++
		}
	}
	return k
}

// checkKeeperGrowth: nine restarts later it is the same keeper, and it
// holds no more sockets (each dead daemon's connection was closed), no
// more other descriptors, and at most a few more threads (the Go runtime
// keeps a thread it once needed under load; one leaked per restart would
// be 9). Its per-process descriptors are checked against its live
// children at each measurement.
func checkKeeperGrowth(t *testing.T, a, b keeperCount) {
	t.Helper()
	if a.PID != b.PID {
		t.Errorf("the keeper changed from pid %d to %d: it did not survive the restarts", a.PID, b.PID)
		return
	}
	if b.Sockets > a.Sockets {
		t.Errorf("keeper sockets grew from %d to %d over %d restarts", a.Sockets, b.Sockets, hammerRestarts-1)
	}
	if b.Other > a.Other {
		t.Errorf("keeper descriptors (not sockets, pipes, pidfds, cgroup or process files) grew from %d to %d:\n%s\nto\n%s", a.Other, b.Other, a.others, b.others)
	}
	if b.Threads > a.Threads+6 {
		t.Errorf("keeper threads grew from %d to %d over %d restarts", a.Threads, b.Threads, hammerRestarts-1)
	}
}

// daemonCount is the daemon's own figures with no call in flight: its
// goroutines and descriptors (health's operator figures), threads, and
// the persistent processes it holds (keeper-held: watched by the feed's
// callbacks, no goroutine each; registry/watch.go).
type daemonCount struct {
	PID, Goroutines, FDs, Threads, Running, Held int
}

// base is the goroutines that are not serving a call: every one, since
// a keeper-held process costs the daemon no goroutine.
func (k daemonCount) base() int { return k.Goroutines }

// measureDaemon reads the daemon's figures with no call in flight, once
// two readings 200 ms apart agree (bounded: exits settle meanwhile).
func (h *hammer) measureDaemon(d *daemonProc) daemonCount {
	h.t.Helper()
	h.gate.Lock()
	defer h.gate.Unlock()
	var k, prev daemonCount
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		k = h.countDaemon(d.cmd.Process.Pid)
		if k == prev || time.Now().After(end) {
			return k
		}
		prev = k
	}
}

func (h *hammer) countDaemon(pid int) daemonCount {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hl, err := h.c.Health(ctx)
	if err != nil || hl.Runtime == nil {
		h.t.Fatalf("daemon health: %+v %v; want the operator's runtime figures", hl, err)
	}
	ps, err := h.c.Processes(ctx, "", "")
	if err != nil {
		h.t.Fatalf("daemon process list: %v", err)
	}
	k := daemonCount{PID: pid, Goroutines: hl.Runtime.Goroutines, FDs: hl.Runtime.FDs, Held: len(ps)}
	for _, p := range ps {
		if p.Phase != "exited" {
			k.Running++
		}
	}
	if fp, err := procfs.ReadFootprint(pid); err == nil {
		k.Threads = fp.Threads
	}
	return k
}

// checkDaemonGrowth: the daemon leaks nothing per call (the daemon of
// restart 1 before and after serving the hammer; the last one before and
// after the workers' last calls) nor per restart (the daemons just
// started at restarts 1 and 10, with their adopted processes): its
// goroutines (none per keeper-held process), and its
// descriptors (it holds none per keeper-held process), stay level. The
// slack covers a call's connection still closing and the runtime's own
// helpers; a leak per call or per adopted process would be hundreds
// after the hammer. Threads are logged, not checked: the Go runtime
// keeps a thread it once needed under load.
func checkDaemonGrowth(t *testing.T, dm [4]daemonCount) {
	t.Helper()
	const slackG, slackFD = 8, 4
	for _, c := range []struct {
		what     string
		from, to daemonCount
	}{
		{"while the daemon of restart 1 served the hammer", dm[0], dm[1]},
		{fmt.Sprintf("from restart 1 to restart %d", hammerRestarts), dm[0], dm[2]},
		{"while the last daemon served the workers' last calls", dm[2], dm[3]},
	} {
		if c.to.base() > c.from.base()+slackG {
			t.Errorf("daemon goroutines grew %s: %d (%d running) to %d (%d running)",
				c.what, c.from.Goroutines, c.from.Running, c.to.Goroutines, c.to.Running)
		}
		if c.to.FDs > c.from.FDs+slackFD {
			t.Errorf("daemon descriptors grew %s: %d to %d (holding %d, then %d processes)", c.what, c.from.FDs, c.to.FDs, c.from.Held, c.to.Held)
		}
	}
}

// TestDurableKeepExited: a graceful stop with the keep policy leaves no
// less than a crash. An exited, unreleased persistent process keeps its
// ID, exit and output across SIGTERM: once with a running process (the
// keeper runs on), once with nothing running (the keeper exits and the
// next one recovers the records). The hammer found the IDs of exited
// processes pointing nowhere after a SIGTERM restart.
func TestDurableKeepExited(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "capsule-host.toml"), nil, 0o600)
	mark := fmt.Sprintf("keepexited-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	c := api.NewUnix(filepath.Join(dir, "d.sock"))
	sigterm := func(d *daemonProc) {
		t.Helper()
		endServe(t, d)
		if d.err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", d.err)
		}
	}
	d := startServe(t, bin, dir)
	awaitServing(t, c, d)
	spawn := func(cmd string) string {
		t.Helper()
		m, code := shellCall(t, c, "alice", "spawn_background_process", map[string]any{"command": cmd})
		if code != "" {
			t.Fatalf("spawn: %s", code)
		}
		id, _ := m["id"].(string)
		return id
	}
	exited := spawn("echo " + mark + "-done; exit 3")
	counter := spawn(fmt.Sprintf("while true; do echo %s; sleep 0.2; done", mark))
	if st := processExit(t, c, "alice", exited); st != "3" {
		t.Fatalf("exit before the restart: %q, want 3", st)
	}
	check := func(when string) {
		t.Helper()
		if st := processExit(t, c, "alice", exited); st != "3" {
			t.Fatalf("%s: the exited process: %q, want exit 3", when, st)
		}
		if out := readAllLogs(t, c, "alice", exited); out != mark+"-done\n" {
			t.Fatalf("%s: the exited process's output %q, want %q", when, out, mark+"-done\n")
		}
	}
	sigterm(d)
	d = startServe(t, bin, dir)
	awaitServing(t, c, d)
	check("after SIGTERM with the keeper running on")
	if _, code := shellCall(t, c, "alice", "kill_process", map[string]any{"id": counter, "grace_ms": 0}); code != "" {
		t.Fatalf("kill: %s", code)
	}
	sigterm(d) // nothing runs: the keeper exits
	d = startServe(t, bin, dir, "--on-shutdown", "stop")
	awaitServing(t, c, d)
	check("after SIGTERM with the keeper gone")
	if st := processExit(t, c, "alice", counter); st != "signal 9" {
		t.Fatalf("the killed counter after the restarts: %q, want signal 9", st)
	}
	endServe(t, d)
	waitNoMarked(t, mark, 30*time.Second)
	waitNoMarked(t, dir, 30*time.Second)
}

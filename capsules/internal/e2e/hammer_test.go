package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/registry"
)

// TestProcessHammer is issue 4's hammer through real wasm guests on real
// pooled instances: 32 goroutines, as 4 principals, call every
// capsule:process function through testcap for 10 s (2 s with -short;
// E2E_HAMMER=30s to change it) while the pool churns (a small pool, calls
// interrupted mid host call so their instance is discarded, and capsule
// reloads). Every outcome must be one the contract allows for that op;
// foreign principals and a foreign capsule must get no-such-process.
// Afterwards the test stops and releases what is left through the guest,
// checks the quota counters came back, closes the host and shuts the
// registry down, then requires: goroutines back to the baseline, no fd
// leaked (the local backend's pooled cgroup fds bounded separately), no
// process left (neither one carrying the hammer's env marker nor any new
// descendant of this test process).
func TestProcessHammer(t *testing.T) {
	dur := 10 * time.Second
	if testing.Short() {
		dur = 2 * time.Second
	}
	if v, err := time.ParseDuration(os.Getenv("E2E_HAMMER")); err == nil {
		dur = v
	}
	// Warm up the whole stack once so the baseline below already counts
	// the process-wide singletons (the local backend's subreaper
	// goroutine, os/signal's loop) and testcap is in the module cache.
	t.Run("warmup", func(t *testing.T) {
		e := newEnv(t, "testcap")
		tc[process.ProcessResult](e, "warmup", "spawn", sh("true"))
	})
	baseG, baseFD, baseKids := settleBaseline()

	marker := fmt.Sprintf("hammer-%d-%d", os.Getpid(), time.Now().UnixNano())
	h, reg := newHostReg(t)
	e := &env{t: t, h: h, reg: reg}
	dir := hammerCapsule(t, "testcap")
	if _, err := h.Load(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	// A second capsule with the same module: its calls on testcap's IDs
	// are the cross-capsule attempts.
	if _, err := h.Load(context.Background(), hammerCapsule(t, "hammer2")); err != nil {
		t.Fatal(err)
	}

	hm := &hammer{h: h, marker: marker, owners: map[string]string{}, insts: map[uint64]bool{}}
	for i := range hm.ps {
		hm.ps[i].name = fmt.Sprintf("p%d", i)
	}
	// One sentinel per principal that no worker touches: instance resets,
	// discards after interrupts, pool eviction and reloads must all leave
	// it running with its output intact.
	sentinels := map[string]string{}
	for i := range hm.ps {
		p := &hm.ps[i]
		sentinels[p.name], _ = tc[string](e, p.name, "spawn_persistent", map[string]any{
			"request": hm.req("echo sentinel up; exec sleep 3600"), "options": map[string]any{"label": "sentinel"}})
		hm.owners[sentinels[p.name]] = p.name
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{hm: hm, g: g, p: g % len(hm.ps), rng: rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano()))),
				ticks: map[string]*tickRead{}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				w.step()
			}
		}()
	}
	// Two reloads under load: the old pool drains, a new one serves, the
	// processes stay.
	var reloads int
	for i := 1; i <= 2; i++ {
		time.Sleep(dur / 3)
		if _, err := h.Load(context.Background(), dir); err != nil {
			t.Errorf("reload: %v", err)
		} else {
			reloads++
		}
	}
	time.Sleep(dur - 2*(dur/3))
	close(stop)
	wg.Wait()
	phase := time.Now()
	var phases []string
	lap := func(name string) {
		phases = append(phases, fmt.Sprintf("%s %v", name, time.Since(phase).Round(time.Millisecond)))
		phase = time.Now()
	}
	// From here to the fd check, no GC: an fd must be closed by the code
	// that opened it (stop, release, reset, Close, Shutdown), not by an
	// *os.File finalizer whenever a GC happens to run.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	hm.report(t)
	if t.Failed() {
		t.Log("hammer outcomes above; cleaning up anyway")
	}

	for name, id := range sentinels {
		info, _ := tc[process.ProcessInfo](e, name, "status", map[string]any{"id": id})
		c, _ := tc[process.LogChunk](e, name, "read_since", map[string]any{"id": id, "stream": "stdout", "max": 1024})
		if info.Phase != process.PhaseRunning || string(c.Data) != "sentinel up\n" {
			t.Errorf("%s's sentinel after the hammer: phase %v, exit %+v, reason %v, stdout %q; want running, \"sentinel up\\n\"",
				name, info.Phase, info.Exit, info.ExitReason, c.Data)
		}
	}

	// Stop and release everything still registered, through the guest.
	for i := range hm.ps {
		p := &hm.ps[i]
		list, _ := tc[[]process.ProcessInfo](e, p.name, "list_processes", map[string]any{})
		for _, info := range list {
			tc[process.ExitInfo](e, p.name, "stop", map[string]any{"id": info.ID, "grace_ms": 100})
			tc[any](e, p.name, "release", map[string]any{"id": info.ID})
		}
		if list, _ = tc[[]process.ProcessInfo](e, p.name, "list_processes", map[string]any{}); len(list) != 0 {
			t.Errorf("%s still lists %d processes after stop+release", p.name, len(list))
		}
	}
	if left := reg.OperatorList(registry.OperatorFilter{}); len(left) != 0 {
		t.Errorf("registry still holds %d entries after every principal released everything: %+v", len(left), left)
	}
	// The quota counters came back: every principal can again run exactly
	// hammerConcurrent processes (a reservation leaked on some failure
	// path would show up as an early quota error here).
	for i := range hm.ps {
		p := &hm.ps[i]
		var ids []string
		for i := range hammerConcurrent + 1 {
			var r resp[string]
			e.call(p.name, "testcap", "spawn_persistent", map[string]any{"request": hm.req("exec sleep 30")}, &r)
			switch {
			case i < hammerConcurrent && r.Error != nil:
				t.Errorf("%s: spawn %d after the hammer: %v (a quota reservation leaked?)", p.name, i, r.Error)
			case i == hammerConcurrent && (r.Error == nil || r.Error.Code != process.ErrQuota):
				t.Errorf("%s: spawn %d after the hammer = %q, %v; want quota", p.name, i+1, r.OK, r.Error)
			}
			if r.Error == nil {
				ids = append(ids, r.OK)
			}
		}
		for _, id := range ids {
			tc[process.ExitInfo](e, p.name, "stop", map[string]any{"id": id, "grace_ms": 0})
			tc[any](e, p.name, "release", map[string]any{"id": id})
		}
	}
	// Nothing the guests started may outlive their stop, release or
	// instance reset (poll: orphans are reaped by the subreaper's tick).
	if !pollUntil(10*time.Second, func() bool { return len(markedProcs(marker)) == 0 }) {
		t.Errorf("processes still running after every stop, release and instance reset: %v", markedProcs(marker))
	}

	lap("guest cleanup")
	if err := h.Close(context.Background()); err != nil {
		t.Errorf("host close: %v", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := reg.Shutdown(sctx); err != nil {
		t.Errorf("registry shutdown: %v", err)
	}

	lap("close+shutdown")
	var g, fd, cg int
	var kids []int
	settled := pollUntil(20*time.Second, func() bool {
		g = runtime.NumGoroutine()
		fd, cg = fdCounts()
		kids = newKids(baseKids)
		return g <= baseG && fd <= baseFD && len(kids) == 0 && len(markedProcs(marker)) == 0
	})
	lap("settle")
	t.Logf("after: goroutines %d (baseline %d), fds %d (baseline %d) + %d pooled cgroup fds, %d reloads; %s",
		g, baseG, fd, baseFD, cg, reloads, strings.Join(phases, ", "))
	if settled {
		return
	}
	if g > baseG {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", baseG, g, buf[:runtime.Stack(buf, true)])
	}
	if fd > baseFD {
		t.Errorf("fds: %d before, %d after: %v", baseFD, fd, fdTargets())
	}
	if len(kids) > 0 {
		t.Errorf("stray descendants of the test process: %v", describeProcs(kids))
	}
	if m := markedProcs(marker); len(m) > 0 {
		t.Errorf("stray processes with the hammer's marker: %v", m)
	}
	if cg > 3*32+4 { // ≤32 pooled groups × (dir, cgroup.procs, cpu.stat) + the runtime's
		t.Errorf("%d cgroup fds open: more than the local backend's bounded pool: %v", cg, fdTargets())
	}
}

// hammerConcurrent is the hammer capsule's max_concurrent (the manifest
// lowers the host's default 8).
const hammerConcurrent = 6

// hammerCapsule copies testcap under name, with a pool small enough to
// make 32 callers queue and churn through instances.
func hammerCapsule(t *testing.T, name string) string {
	t.Helper()
	src := capsuleDir(t, "testcap")
	toml, err := os.ReadFile(filepath.Join(src, "Capsule.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(toml)
	for old, new := range map[string]string{
		`name = "testcap"`:        `name = "` + name + `"`,
		"min_idle = 3\nmax = 8\n": "min_idle = 1\nmax = 4\nidle_ttl = \"1s\"\n",
	} {
		if !strings.Contains(s, old) {
			t.Fatalf("capsules/testcap/Capsule.toml no longer contains %q: update hammerCapsule", old)
		}
		s = strings.Replace(s, old, new, 1)
	}
	s += fmt.Sprintf("\n[limits]\nmax_concurrent = %d\n", hammerConcurrent)
	mod := moduleLine.FindStringSubmatch(s)[1] // testcap.wasm, or the component
	wasm, err := os.ReadFile(filepath.Join(src, mod))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Capsule.toml"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, mod), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Kinds of persistent process the hammer spawns.
const (
	kShort   = iota // prints and exits at once
	kFail           // exits 3
	kTicker         // a numbered line every 100 ms for 30 s
	kEcho           // echoes stdin lines (keep-stdin-open)
	kSleeper        // sleeps 2 s or 30 s; sometimes with a lifetime or idle bound
	kCat            // /bin/cat (keep-stdin-open)
	nKinds
)

var tickerScript = `i=0; while [ $i -lt 300 ]; do echo tick $i; i=$((i+1)); sleep 0.1; done`

// tickerText is what a ticker prints in full.
var tickerText = func() string {
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "tick %d\n", i)
	}
	return b.String()
}()

type entry struct {
	id   string
	kind int
}

type principal struct {
	name string
	mu   sync.Mutex
	ids  []entry
}

type hammer struct {
	h      *host.Host
	marker string
	ps     [4]principal

	mu     sync.Mutex
	owners map[string]string // id → principal
	insts  map[uint64]bool   // instances that answered
	stats  map[string]int    // "op outcome" → count
	bad    []string
	nbad   int
	calls  atomic.Int64
}

// req is a spawn request for a shell script, carrying the marker in its
// environment (inherited by every process of the tree).
func (hm *hammer) req(script string) map[string]any {
	r := sh(script)
	r["env"] = []map[string]string{{"key": "CAPSULE_HAMMER_MARKER", "value": hm.marker}}
	return r
}

func (hm *hammer) fail(format string, args ...any) {
	hm.mu.Lock()
	defer hm.mu.Unlock()
	hm.nbad++
	if len(hm.bad) < 40 {
		hm.bad = append(hm.bad, fmt.Sprintf(format, args...))
	}
}

func (hm *hammer) count(op, outcome string) {
	hm.mu.Lock()
	if hm.stats == nil {
		hm.stats = map[string]int{}
	}
	hm.stats[op+" "+outcome]++
	hm.mu.Unlock()
}

func (hm *hammer) report(t *testing.T) {
	hm.mu.Lock()
	defer hm.mu.Unlock()
	keys := make([]string, 0, len(hm.stats))
	for k := range hm.stats {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-40s %d\n", k, hm.stats[k])
	}
	t.Logf("%d calls by 32 goroutines on %d distinct instances; outcomes:\n%s", hm.calls.Load(), len(hm.insts), b.String())
	for _, s := range hm.bad {
		t.Error(s)
	}
	if hm.nbad > len(hm.bad) {
		t.Errorf("... and %d more unexpected outcomes", hm.nbad-len(hm.bad))
	}
	if len(hm.insts) <= 4 {
		t.Errorf("only %d instances served the hammer: the pool did not churn", len(hm.insts))
	}
	for _, must := range []string{"spawn_persistent ok", "read_since ok", "write_stdin ok", "stop ok", "release ok",
		"attach_ops ok", "spawn ok", "spawn_background_ops ok", "poll_events ok", "cross-principal no-such-process",
		"cross-capsule no-such-process", "interrupted timeout"} {
		if hm.stats[must] == 0 {
			t.Errorf("the mix never produced %q", must)
		}
	}
}

// call runs a testcap tool. code is "" when the contract call succeeded
// (out then holds the ok value), else the error-code's name; err is a
// host-level failure (anything but the tool's {"ok"|"error"} answer).
func (hm *hammer) call(ctx context.Context, principal, capsule, tool string, in, out any) (code string, err error) {
	hm.calls.Add(1)
	b, err := json.Marshal(in)
	if err != nil {
		return "", err
	}
	r, err := hm.h.Call(host.WithPrincipal(ctx, principal), capsule, tool, string(b))
	if err != nil {
		return "", err
	}
	hm.mu.Lock()
	hm.insts[r.Instance] = true
	hm.mu.Unlock()
	var res resp[json.RawMessage]
	if err := json.Unmarshal([]byte(r.Output), &res); err != nil {
		return "", fmt.Errorf("output %s: %w", r.Output, err)
	}
	if res.Error != nil {
		return res.Error.Code.String(), nil
	}
	if out != nil && len(res.OK) > 0 {
		if err := json.Unmarshal(res.OK, out); err != nil {
			return "", fmt.Errorf("ok value %s: %w", res.OK, err)
		}
	}
	return "", nil
}

// expect records an outcome and fails unless it is ok or one of allowed
// ("timeout" allows the host's call timeout).
func (hm *hammer) expect(op string, in any, code string, err error, allowed ...string) bool {
	switch {
	case err != nil && errors.Is(err, host.ErrTimeout) && slices.Contains(allowed, "timeout"):
		hm.count(op, "timeout")
		return false
	case err != nil:
		hm.count(op, "HOST-ERROR")
		b, _ := json.Marshal(in)
		hm.fail("%s(%s): host error: %v", op, b, err)
		return false
	case code == "":
		hm.count(op, "ok")
		return true
	case slices.Contains(allowed, code):
		hm.count(op, code)
		return false
	}
	hm.count(op, "UNEXPECTED "+code)
	b, _ := json.Marshal(in)
	hm.fail("%s(%s): error-code %s is not a legitimate outcome (allowed: ok, %v)", op, b, code, allowed)
	return false
}

type tickRead struct {
	next string
	data []byte
}

// worker is one hammer goroutine, acting as one principal.
type worker struct {
	hm     *hammer
	g, p   int
	rng    *rand.Rand
	ticks  map[string]*tickRead // per ticker ID: this worker's cursor and what it read
	seq    int
	events uint64 // this worker's poll-events cursor
}

func (w *worker) me() *principal { return &w.hm.ps[w.p] }

// pick returns one of the principal's IDs (nil one in ten: a bogus ID).
func (w *worker) pick(p *principal) (entry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) == 0 || w.rng.IntN(10) == 0 {
		return entry{id: []string{strings.Repeat("a", 52), "not-an-id", ""}[w.rng.IntN(3)], kind: -1}, false
	}
	return p.ids[w.rng.IntN(len(p.ids))], true
}

func (w *worker) forget(id string) {
	p := w.me()
	p.mu.Lock()
	p.ids = slices.DeleteFunc(p.ids, func(e entry) bool { return e.id == id })
	p.mu.Unlock()
	delete(w.ticks, id)
}

func (w *worker) do(op string, in, out any, allowed ...string) bool {
	code, err := w.hm.call(context.Background(), w.me().name, "testcap", op, in, out)
	return w.hm.expect(op, in, code, err, allowed...)
}

const nsp = "no-such-process"

func (w *worker) step() {
	hm, me := w.hm, w.me()
	switch op := w.rng.IntN(22); op {
	case 0, 1, 2:
		w.spawnPersistent()
	case 3, 4:
		w.readSince()
	case 5:
		ent, _ := w.pick(me)
		var l process.ReadLogsResult
		if w.do("read_logs", map[string]any{"id": ent.id}, &l, nsp) && l.BytesDropped != 0 {
			hm.fail("read_logs(%s): %d bytes dropped from a 1 MiB ring", ent.id, l.BytesDropped)
		}
	case 6:
		ent, _ := w.pick(me)
		var info process.ProcessInfo
		if w.do("status", map[string]any{"id": ent.id}, &info, nsp) && info.ID != ent.id {
			hm.fail("status(%s) answered for %s", ent.id, info.ID)
		}
		a, _ := w.pick(me)
		b, _ := w.pick(&hm.ps[(w.p+1)%len(hm.ps)]) // a foreign ID must never be answered
		var many []process.ProcessInfo
		in := map[string]any{"ids": []string{a.id, b.id}}
		if w.do("status_many", in, &many) {
			for _, i := range many {
				if i.ID != a.id {
					hm.fail("status_many(%v) as %s answered for %s", in["ids"], me.name, i.ID)
				}
			}
		}
	case 7:
		var list []process.ProcessInfo
		in := map[string]any{}
		if w.rng.IntN(2) == 0 {
			in["label"] = "tick"
		}
		if w.do("list_processes", in, &list) {
			hm.mu.Lock()
			for _, i := range list {
				if o, ok := hm.owners[i.ID]; ok && o != me.name {
					hm.fail("list_processes as %s lists %s, owned by %s", me.name, i.ID, o)
				}
			}
			hm.mu.Unlock()
		}
	case 8:
		ent, _ := w.pick(me)
		w.seq++
		data := fmt.Sprintf("w%d-%d\n", w.g, w.seq)
		var n uint32
		// closed: not kept open, closed by close_stdin, or exited;
		// torn-write: the process exited mid-write.
		if w.do("write_stdin", map[string]any{"id": ent.id, "data": data}, &n, nsp, "closed", "torn-write") && int(n) != len(data) {
			hm.fail("write_stdin(%s) = %d of %d bytes, and no error", ent.id, n, len(data))
		}
		if w.rng.IntN(8) == 0 {
			w.do("close_stdin", map[string]any{"id": ent.id}, nil, nsp)
		}
	case 9:
		ent, _ := w.pick(me)
		sig := []string{"term", "hup", "int", "usr1", "cont", "kill", "stop"}[w.rng.IntN(7)]
		w.do("signal", map[string]any{"id": ent.id, "sig": sig}, nil, nsp)
		if sig == "stop" {
			w.do("signal", map[string]any{"id": ent.id, "sig": "cont"}, nil, nsp)
		}
	case 10:
		ent, _ := w.pick(me)
		w.do("wait", map[string]any{"id": ent.id, "timeout_ms": w.rng.IntN(200)}, nil, nsp, "wait-timeout")
	case 11:
		ent, _ := w.pick(me)
		if w.do("stop", map[string]any{"id": ent.id, "grace_ms": w.rng.IntN(150)}, nil, nsp) {
			if w.do("release", map[string]any{"id": ent.id}, nil, nsp) {
				w.forget(ent.id)
			}
		}
	case 12:
		ent, _ := w.pick(me)
		// invalid-input: the process is still running.
		if w.do("release", map[string]any{"id": ent.id}, nil, nsp, "invalid-input") {
			w.forget(ent.id)
		}
	case 13:
		w.attach()
	case 14:
		var r process.ProcessResult
		in := hm.req("echo out; echo err >&2; exit 2")
		if w.do("spawn", in, &r, "quota") && (string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || code(r.Exit) != 2 || r.Truncated) {
			hm.fail("spawn = %q %q %+v", r.Stdout, r.Stderr, r.Exit)
		}
	case 15:
		w.background()
	case 16:
		var b process.EventBatch
		if w.do("poll_events", map[string]any{"cursor": w.events, "max": 32, "timeout_ms": w.rng.IntN(100)}, &b) {
			if b.Next < w.events {
				hm.fail("poll_events as %s: cursor went back from %d to %d", me.name, w.events, b.Next)
			}
			w.events = b.Next
			hm.mu.Lock()
			for _, ev := range b.Events {
				if o, ok := hm.owners[ev.ID]; ok && o != me.name {
					hm.fail("poll_events as %s shows an event of %s (owned by %s)", me.name, ev.ID, o)
				}
			}
			hm.mu.Unlock()
		}
	case 17, 18:
		w.foreign(op == 18)
	case 19:
		w.interrupted()
	case 20, 21:
		w.readSince()
	}
}

func (w *worker) spawnPersistent() {
	hm, me := w.hm, w.me()
	kind := w.rng.IntN(nKinds)
	opts := map[string]any{}
	var r map[string]any
	switch kind {
	case kShort:
		r = hm.req("echo start; echo done")
	case kFail:
		r = hm.req("echo oops >&2; exit 3")
	case kTicker:
		r = hm.req(tickerScript)
		opts["label"] = "ticker"
	case kEcho:
		r = hm.req(`while read l; do echo "got:$l"; done`)
		opts["keep_stdin_open"] = true
	case kSleeper:
		r = hm.req([]string{"exec sleep 2", "exec sleep 30"}[w.rng.IntN(2)])
		switch w.rng.IntN(4) {
		case 0:
			opts["max_lifetime_ms"] = 400
		case 1:
			opts["idle_timeout_ms"] = 500
		case 2:
			opts["keep_stdin_open"] = true
		}
	case kCat:
		r = map[string]any{"cmd": "/bin/cat", "env": hm.req("")["env"]}
		opts["keep_stdin_open"] = true
	}
	var id string
	if w.do("spawn_persistent", map[string]any{"request": r, "options": opts}, &id, "quota", "registry-full") {
		hm.mu.Lock()
		hm.owners[id] = me.name
		hm.mu.Unlock()
		me.mu.Lock()
		me.ids = append(me.ids, entry{id: id, kind: kind})
		me.mu.Unlock()
	}
}

// readSince continues this worker's cursor on a ticker (checking the bytes
// are exactly the ticker's output so far) or reads any ID from the start.
func (w *worker) readSince() {
	hm := w.hm
	ent, _ := w.pick(w.me())
	tr := w.ticks[ent.id]
	in := map[string]any{"id": ent.id, "stream": "stdout", "max": 1 + w.rng.IntN(64)}
	if tr != nil {
		in["cursor"] = tr.next
	}
	var c process.LogChunk
	if !w.do("read_since", in, &c, nsp) {
		return
	}
	if c.BytesDropped != 0 {
		hm.fail("read_since(%s): %d bytes dropped from a 1 MiB ring", ent.id, c.BytesDropped)
	}
	if ent.kind != kTicker {
		return
	}
	if tr == nil {
		tr = &tickRead{}
		w.ticks[ent.id] = tr
	}
	tr.next = c.Next
	tr.data = append(tr.data, c.Data...)
	if len(c.Data) > 0 {
		hm.count("read_since", "ticker chunk continued its cursor chain")
	}
	if !strings.HasPrefix(tickerText, string(tr.data)) {
		hm.fail("read_since cursor chain on ticker %s: read %q, not a prefix of the ticker's output", ent.id, tr.data)
		delete(w.ticks, ent.id)
	}
}

func (w *worker) attach() {
	hm := w.hm
	ent, _ := w.pick(w.me())
	ops := []map[string]any{{"op": "os_pid"}, {"op": "read_logs"}, {"op": "wait", "timeout_ms": w.rng.IntN(50)}}
	if ent.kind == kEcho || ent.kind == kCat {
		ops = append(ops, map[string]any{"op": "write_stdin", "data": "attached\n"})
	}
	if w.rng.IntN(2) == 0 {
		ops = append(ops, map[string]any{"op": "drop"})
	}
	var out opsOut
	in := map[string]any{"id": ent.id, "ops": ops}
	if !w.do("attach_ops", in, &out, nsp) {
		return
	}
	if len(out.Results) != len(ops) {
		hm.fail("attach_ops(%s): %d results for %d ops", ent.id, len(out.Results), len(ops))
		return
	}
	// A concurrent release makes the handle's process vanish: nsp.
	allowed := map[string][]string{
		"os_pid":      {"closed", nsp}, // closed once exited
		"read_logs":   {nsp},
		"wait":        {"wait-timeout", nsp},
		"write_stdin": {"closed", "torn-write", nsp}, // closed once exited or closed
		"drop":        {},
	}
	for i, r := range out.Results {
		name := ops[i]["op"].(string)
		c := errCode(r)
		op := "attach." + name
		if c == "" {
			hm.count(op, "ok")
		} else if slices.Contains(allowed[name], c) {
			hm.count(op, c)
		} else {
			hm.count(op, "UNEXPECTED "+c)
			hm.fail("attach_ops(%s) op %s = %v: not a legitimate outcome", ent.id, name, r)
		}
	}
}

// background: spawn-background and handle ops; the handle is dropped at
// the end of the call, or left to the instance reset (keep_handle).
func (w *worker) background() {
	hm := w.hm
	var in map[string]any
	var check func(out opsOut) string
	switch w.rng.IntN(4) {
	case 0:
		r := map[string]any{"cmd": "/bin/cat", "stdin": []byte("abc"), "env": hm.req("")["env"]}
		in = map[string]any{"request": r, "ops": []map[string]any{
			{"op": "write_stdin", "data": "def"}, {"op": "close_stdin"}, {"op": "wait_with_output", "timeout_ms": 10000}}}
		check = func(out opsOut) string {
			wo, _ := out.Results[2]["ok"].(map[string]any)
			if wo["stdout"] != "YWJjZGVm" { // base64("abcdef")
				return "cat did not echo abcdef"
			}
			return ""
		}
	case 1:
		in = map[string]any{"request": hm.req("exec sleep 30"), "ops": []map[string]any{
			{"op": "signal", "sig": "usr1"}, {"op": "wait", "timeout_ms": 10000}}}
		check = func(out opsOut) string {
			if ex, _ := out.Results[1]["ok"].(map[string]any); ex["signal"] != float64(10) {
				return "usr1 did not end the sleeper"
			}
			return ""
		}
	case 2:
		in = map[string]any{"request": hm.req("exec sleep 30"), "ops": []map[string]any{{"op": "os_pid"}}, "keep_handle": true}
	case 3:
		in = map[string]any{"request": hm.req("exec sleep 30"), "ops": []map[string]any{{"op": "kill"}, {"op": "drop"}}}
	}
	var out opsOut
	if !w.do("spawn_background_ops", in, &out, "quota") {
		return
	}
	for i, r := range out.Results {
		if r["error"] != nil {
			hm.fail("spawn_background_ops(%v): op %d = %v", in["ops"], i, r)
			return
		}
	}
	if check != nil {
		if msg := check(out); msg != "" {
			hm.fail("spawn_background_ops: %s: %v", msg, out.Results)
		}
	}
}

// foreign: another principal's ID (or, crossCapsule, the same principal's
// ID through another capsule) is indistinguishable from an unknown one.
func (w *worker) foreign(crossCapsule bool) {
	hm := w.hm
	caller, capsule, op := w.me().name, "testcap", "cross-principal"
	owner := &hm.ps[(w.p+1+w.rng.IntN(len(hm.ps)-1))%len(hm.ps)]
	if crossCapsule {
		caller, capsule, op, owner = w.me().name, "hammer2", "cross-capsule", w.me()
	}
	ent, real := w.pick(owner)
	if !real {
		return
	}
	calls := []struct {
		tool string
		in   map[string]any
	}{
		{"status", map[string]any{"id": ent.id}},
		{"read_since", map[string]any{"id": ent.id, "stream": "stdout", "max": 64}},
		{"read_logs", map[string]any{"id": ent.id}},
		{"write_stdin", map[string]any{"id": ent.id, "data": "intruder\n"}},
		{"close_stdin", map[string]any{"id": ent.id}},
		{"signal", map[string]any{"id": ent.id, "sig": "kill"}},
		{"wait", map[string]any{"id": ent.id, "timeout_ms": 10}},
		{"stop", map[string]any{"id": ent.id, "grace_ms": 0}},
		{"release", map[string]any{"id": ent.id}},
		{"attach_ops", map[string]any{"id": ent.id, "ops": []any{}}},
	}
	c := calls[w.rng.IntN(len(calls))]
	code, err := hm.call(context.Background(), caller, capsule, c.tool, c.in, nil)
	switch {
	case err != nil:
		hm.count(op, "HOST-ERROR")
		hm.fail("%s %s(%s) as %s: host error %v", op, c.tool, ent.id, caller, err)
	case code != nsp:
		hm.count(op, "UNEXPECTED "+code)
		hm.fail("%s %s(%s) as %s via %s = %q; want no-such-process", op, c.tool, ent.id, caller, capsule, code)
	default:
		hm.count(op, code)
	}
}

// interrupted: a call whose deadline passes while the guest is blocked in
// a host call. The engine interrupts the guest and the pool discards the
// instance, whose reset must reap its ephemeral process and detach its
// attached handle — and nothing else.
func (w *worker) interrupted() {
	hm := w.hm
	ent, _ := w.pick(w.me())
	var tool string
	var in map[string]any
	switch w.rng.IntN(3) {
	case 0:
		// Blocks unless an event arrived since this worker's last poll.
		tool, in = "poll_events", map[string]any{"cursor": w.events, "max": 8, "timeout_ms": 5000}
	case 1:
		tool, in = "spawn_background_ops", map[string]any{"request": hm.req("exec sleep 30"),
			"ops": []map[string]any{{"op": "wait", "timeout_ms": 5000}}, "keep_handle": true}
	case 2:
		tool, in = "attach_ops", map[string]any{"id": ent.id, "keep_handle": true,
			"ops": []map[string]any{{"op": "wait", "timeout_ms": 5000}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(100+w.rng.IntN(200))*time.Millisecond)
	defer cancel()
	var out json.RawMessage
	code, err := hm.call(ctx, w.me().name, "testcap", tool, in, &out)
	switch {
	case err != nil && errors.Is(err, host.ErrTimeout):
		hm.count("interrupted", "timeout")
	case err != nil:
		hm.count("interrupted", "HOST-ERROR")
		hm.fail("interrupted %s: %v", tool, err)
	default:
		// The process exited (or the ID was bad) before the deadline,
		// or the spawn hit the quota: the call completed normally.
		if code == "" || code == nsp || code == "quota" {
			hm.count("interrupted", "completed "+code)
		} else {
			hm.count("interrupted", "UNEXPECTED "+code)
			hm.fail("interrupted %s = %q", tool, code)
		}
	}
}

// settleBaseline waits for the goroutine count to stop falling (the
// warmup's pools and watchers wind down asynchronously) and returns the
// baseline goroutines, non-cgroup fds and descendant processes.
func settleBaseline() (int, int, map[int]bool) {
	prev, stable := -1, 0
	for range 100 {
		runtime.GC()
		n := runtime.NumGoroutine()
		if n == prev {
			if stable++; stable == 3 {
				break
			}
		} else {
			prev, stable = n, 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	fd, _ := fdCounts()
	kids := map[int]bool{}
	for _, k := range descendants() {
		kids[k] = true
	}
	return prev, fd, kids
}

func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fdCounts counts this process's open fds, apart from those under
// /sys/fs/cgroup: the local backend keeps a bounded, process-wide pool
// (at most 32 groups, 3 fds each) of cgroups open for reuse, and the Go
// runtime watches its own cgroup's CPU files. Those are caches, not
// leaks; they are bounded separately (as registry/hammer_test.go does).
func fdCounts() (other, cgroup int) {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, d := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + d.Name())
		if strings.HasPrefix(l, "/sys/fs/cgroup/") {
			cgroup++
		} else {
			other++
		}
	}
	return other, cgroup
}

func fdTargets() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, d := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + d.Name())
		out = append(out, d.Name()+"→"+l)
	}
	return out
}

// procTable maps every pid to its ppid (zombies included: a zombie is a
// leak too).
func procTable() map[int]int {
	ents, _ := os.ReadDir("/proc")
	out := map[int]int{}
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			out[pid] = ppid
		}
	}
	return out
}

// descendants lists the processes whose parent chain reaches this test
// process (the local backend makes it a child subreaper, so orphans of
// its trees are re-parented here and stay visible).
func descendants() []int {
	tab := procTable()
	self := os.Getpid()
	var out []int
	for pid := range tab {
		for p, n := tab[pid], 0; p > 1 && n < 64; p, n = tab[p], n+1 {
			if p == self {
				out = append(out, pid)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func newKids(base map[int]bool) []int {
	var out []int
	for _, k := range descendants() {
		if !base[k] {
			out = append(out, k)
		}
	}
	return out
}

// markedProcs lists the processes carrying the hammer's env marker.
func markedProcs(marker string) []string {
	want := []byte("CAPSULE_HAMMER_MARKER=" + marker + "\x00")
	var out []string
	for pid := range procTable() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil || !bytes.Contains(append(b, 0), want) {
			continue
		}
		out = append(out, describeProcs([]int{pid})...)
	}
	return out
}

func describeProcs(pids []int) []string {
	var out []string
	for _, pid := range pids {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		state := ""
		if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
			state = string(st[i+2])
		}
		out = append(out, fmt.Sprintf("%d[%s] %q", pid, state, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
	}
	return out
}

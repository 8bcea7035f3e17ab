package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

type env struct {
	h   *host.Host
	reg *registry.Registry
	log *testutil.SyncBuffer
}

// cacheDir is shared by every Host in the test binary, so a Go guest is
// compiled once per run, not once per test.
var cacheDir string

func TestMain(m *testing.M) { os.Exit(testutil.RunWithTempDir(m, "host-test-cache-", &cacheDir)) }

// moduleCache is the compile cache of the tests' hosts: the engine's part
// of $CAPSULE_HOST_CACHE_DIR when set (make test warms one for its race
// leg, as for capsules/internal/e2e), else cacheDir.
func moduleCache() string {
	if d := host.EnvCacheDir(enginetest.HostEngine()); d != "" {
		return d
	}
	return cacheDir
}

func newRegistry(t testing.TB) *registry.Registry {
	t.Helper()
	b, err := local.New(local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Config{
		Backends: map[string]sandbox.Backend{"local": b},
		StateDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Shutdown(context.Background()) })
	return reg
}

func newHost(t testing.TB, mod func(*host.Config)) *env {
	t.Helper()
	e := &env{reg: newRegistry(t), log: &testutil.SyncBuffer{}}
	cfg := host.Config{
		Engine:      enginetest.HostEngine(), // "" (wazero) unless the wasmtime leg sets it
		Registry:    e.reg,
		StateDir:    t.TempDir(),
		Logger:      slog.New(slog.NewTextHandler(e.log, nil)),
		CallTimeout: 5 * time.Second,
		CacheDir:    moduleCache(),
	}
	if mod != nil {
		mod(&cfg)
	}
	h, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	e.h = h
	return e
}

// capsuleDir writes a capsule directory holding wasmFile and a manifest
// pinning it; extra is appended to the manifest.
func capsuleDir(t testing.TB, name, wasmFile, extra string) string {
	t.Helper()
	wasm, err := os.ReadFile(wasmFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "guest.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	m := fmt.Sprintf("[capsule]\nname = %q\nversion = \"1.0.0\"\nmodule = \"guest.wasm\"\nsha256 = %q\n%s", name, hex.EncodeToString(sum[:]), extra)
	if err := os.WriteFile(filepath.Join(dir, manifest.FileName), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const toolsWasm = "testdata/tools/tools.wasm"

func load(t testing.TB, e *env, name, extra string) *host.Capsule {
	t.Helper()
	c, err := e.h.Load(context.Background(), capsuleDir(t, name, toolsWasm, extra))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoadDescribeCall(t *testing.T) {
	e := newHost(t, nil)
	c := load(t, e, "tools", "")
	var names []string
	for _, tl := range c.Tools() {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "noop,spin,trap,oob,fail,echo,hello,bad" {
		t.Fatalf("tools %s", got)
	}
	if c.Tools()[0].InputSchema != `{"type":"object"}` || c.Tools()[0].Description != "does nothing" {
		t.Fatalf("spec %+v", c.Tools()[0])
	}
	ctx := host.WithPrincipal(context.Background(), "alice")
	r, err := e.h.Call(ctx, "tools", "echo", `{"x":1}`)
	if err != nil || r.Output != `{"x":1}` || r.Instance == 0 {
		t.Fatalf("echo: %+v %v", r, err)
	}
	_, err = e.h.Call(ctx, "tools", "fail", `{}`)
	var te *host.ToolError
	if !errors.As(err, &te) || te.Message != "boom" || !errors.Is(err, host.ErrToolFailed) {
		t.Fatalf("fail: %v", err)
	}
	// A tool error leaves the instance healthy.
	if st := c.Stats(); st.Discarded != 0 {
		t.Fatalf("tool error discarded an instance: %+v", st)
	}
}

func TestGuestStdoutToLog(t *testing.T) {
	e := newHost(t, nil)
	load(t, e, "tools", "")
	if _, err := e.h.Call(context.Background(), "tools", "hello", "{}"); err != nil {
		t.Fatal(err)
	}
	out := e.log.String()
	if !strings.Contains(out, `msg="guest stdout" capsule=tools instance=`) || !strings.Contains(out, `line="hello from tools"`) {
		t.Fatalf("log:\n%s", out)
	}
}

func TestCallErrors(t *testing.T) {
	e := newHost(t, nil)
	load(t, e, "tools", "")
	bg := context.Background()
	tests := []struct {
		name          string
		ctx           context.Context
		capsule, tool string
		want          error
		msg           string
	}{
		{"unknown capsule", bg, "nope", "noop", host.ErrUnknownCapsule, `unknown capsule: "nope"`},
		{"unknown tool", bg, "tools", "nope", host.ErrUnknownTool, `capsule "tools" has no tool "nope"`},
		{"bad principal", host.WithPrincipal(bg, "../etc"), "tools", "noop", host.ErrInvalidPrincipal, `principal "../etc": byte 0`},
		{"empty principal", host.WithPrincipal(bg, ""), "tools", "noop", host.ErrInvalidPrincipal, `principal must be 1..128 bytes`},
		{"claims owner", host.WithPrincipal(bg, "owner:tools"), "tools", "noop", host.ErrInvalidPrincipal, `owner-fallback`},
		{"input not UTF-8", bg, "tools", "echo", host.ErrInvalidInput, `input is not valid UTF-8`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			input := "{}"
			if tc.want == host.ErrInvalidInput {
				input = "{\xff}"
			}
			_, err := e.h.Call(tc.ctx, tc.capsule, tc.tool, input)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v; want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
}

func TestTimeoutInterruptsAndPoolKeepsServing(t *testing.T) {
	e := newHost(t, func(c *host.Config) { c.CallTimeout = 100 * time.Millisecond })
	c := load(t, e, "tools", "[pool]\nmin_idle = 2\nmax = 2\n")
	start := time.Now()
	_, err := e.h.Call(context.Background(), "tools", "spin", "{}")
	var te *host.TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, host.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if te.Capsule != "tools" || te.Tool != "spin" || te.Waiting || !strings.Contains(err.Error(), `capsule "tools" tool "spin": timed out: interrupted after`) {
		t.Fatalf("timeout error %+v: %v", te, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("interrupt took %v", d)
	}
	// The caller's own earlier deadline wins over CallTimeout too.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := e.h.Call(ctx, "tools", "spin", "{}"); !errors.Is(err, host.ErrTimeout) {
		t.Fatalf("ctx deadline: %v", err)
	}
	for i := 0; i < 4; i++ {
		if _, err := e.h.Call(context.Background(), "tools", "noop", "{}"); err != nil {
			t.Fatalf("after timeout: %v", err)
		}
	}
	if st := c.Stats(); st.Discarded != 2 || st.Live > 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCancel(t *testing.T) {
	e := newHost(t, nil)
	load(t, e, "tools", "")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := e.h.Call(ctx, "tools", "spin", "{}")
	if !errors.Is(err, host.ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestTrapDiscardsInstance(t *testing.T) {
	e := newHost(t, nil)
	c := load(t, e, "tools", "[pool]\nmin_idle = 2\nmax = 4\n")
	for _, tc := range []struct{ tool, reason string }{
		{"trap", "unreachable"},
		{"oob", "out of bounds memory access"},
		{"bad", "UTF-8"},
	} {
		_, err := e.h.Call(context.Background(), "tools", tc.tool, "{}")
		var tr *host.TrapError
		if !errors.As(err, &tr) || !errors.Is(err, host.ErrTrap) || !strings.Contains(tr.Reason, tc.reason) || tr.Tool != tc.tool || tr.Instance == 0 {
			t.Fatalf("%s: err = %v", tc.tool, err)
		}
		// The trapped instance never serves again.
		for i := 0; i < 6; i++ {
			r, err := e.h.Call(context.Background(), "tools", "noop", "{}")
			if err != nil {
				t.Fatal(err)
			}
			if r.Instance == tr.Instance {
				t.Fatalf("trapped instance %d served again", tr.Instance)
			}
		}
	}
	if st := c.Stats(); st.Discarded != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// Consecutive calls rotate across instances (FIFO reuse).
func TestFIFORotation(t *testing.T) {
	e := newHost(t, nil)
	c := load(t, e, "tools", "[pool]\nmin_idle = 3\nmax = 3\n")
	waitFor(t, func() bool { return c.Stats().Idle == 3 })
	ctx := host.WithPrincipal(context.Background(), "alice")
	var seen []uint64
	for i := 0; i < 6; i++ {
		r, err := e.h.Call(ctx, "tools", "noop", "{}")
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, r.Instance)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] == seen[i-1] {
			t.Fatalf("consecutive calls on one instance: %v", seen)
		}
	}
	if seen[0] != seen[3] || seen[1] != seen[4] || seen[0] == seen[1] || seen[1] == seen[2] || seen[0] == seen[2] {
		t.Fatalf("not a 3-instance rotation: %v", seen)
	}
}

// Callers beyond max wait for a free instance, until their deadline.
func TestPoolMaxWaitAndGrowth(t *testing.T) {
	e := newHost(t, func(c *host.Config) { c.CallTimeout = 700 * time.Millisecond })
	c := load(t, e, "tools", "[pool]\nmin_idle = 0\nmax = 2\nmax_per_principal = 2\n")
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.h.Call(context.Background(), "tools", "spin", "{}")
		}()
	}
	waitFor(t, func() bool { return c.Stats().Busy == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := e.h.Call(ctx, "tools", "noop", "{}")
	var te *host.TimeoutError
	if !errors.As(err, &te) || !te.Waiting || !strings.Contains(err.Error(), `capsule "tools" tool "noop": timed out: no free instance within`) {
		t.Fatalf("third caller: %v", err)
	}
	// Once the spinners are interrupted, a waiting caller gets served.
	if _, err := e.h.Call(context.Background(), "tools", "noop", "{}"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if st := c.Stats(); st.Live > 2 {
		t.Fatalf("grew beyond max: %+v", st)
	}
	// Concurrency up to max: two parallel calls grow the pool to 2.
	e2 := newHost(t, nil)
	c2 := load(t, e2, "tools", "[pool]\nmin_idle = 1\nmax = 2\n")
	var wg2 sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			if _, err := e2.h.Call(context.Background(), "tools", "noop", "{}"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg2.Wait()
	if st := c2.Stats(); st.Live > 2 {
		t.Fatalf("live %d > max 2: %+v", st.Live, st)
	}
}

func TestIdleEviction(t *testing.T) {
	e := newHost(t, nil)
	c := load(t, e, "tools", "[pool]\nmin_idle = 1\nmax = 4\nidle_ttl = \"1s\"\n")
	// Grow the pool with parallel calls, tracking the peak.
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	stop := time.Now().Add(300 * time.Millisecond)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if _, err := e.h.Call(context.Background(), "tools", "noop", "{}"); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				peak = max(peak, c.Stats().Live)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if peak < 2 || peak > 4 {
		t.Fatalf("8 parallel callers grew the pool to %d instances, want 2..4", peak)
	}
	// Idle instances beyond min_idle are evicted after idle_ttl.
	waitFor(t, func() bool { st := c.Stats(); return st.Live == 1 && st.Idle == 1 })
	if st := c.Stats(); st.Evicted == 0 {
		t.Fatalf("no eviction recorded: %+v", st)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestImportValidation(t *testing.T) {
	e := newHost(t, nil)
	served := "(this host serves capsule:process/host@1.0.0, capsule:process/host@1.1.0, capsule:process/host@1.2.0)"
	tests := []struct {
		name, wasm, extra string
		want              error
		msg               string
	}{
		{"unknown version", "badmodule", "[imports]\n\"capsule:process\" = \"1.0\"\n", host.ErrImport,
			`capsule "x": import "capsule:process/host@2.0.0" "spawn": not served ` + served},
		{"unknown function", "badfunc", "[imports]\n\"capsule:process\" = \"1.0\"\n", host.ErrImport,
			`capsule "x": import "capsule:process/host@1.0.0" "spawn-persistent": no such function in capsule:process/host@1.0.0 ` + served},
		{"wrong signature", "badsig", "[imports]\n\"capsule:process\" = \"1.0\"\n", host.ErrImport,
			`capsule "x": import "capsule:process/host@1.0.0" "[resource-drop]process-handle": core signature (i32, i32) -> () does not match the host's (i32) -> ()`},
		{"unknown wasi", "badwasi", "", host.ErrImport,
			`capsule "x": import "wasi_snapshot_preview1" "fd_mmap": not a WASI preview1 function`},
		{"undeclared", "goodimport", "", host.ErrImport,
			`capsule "x": ` + "%DIR%" + `/Capsule.toml: imports: the module imports "capsule:process/host@1.1.0" but [imports] does not declare "capsule:process"`},
		{"declared older version", "goodimport", "[imports]\n\"capsule:process\" = \"1.0\"\n", host.ErrImport,
			`/Capsule.toml:7: imports."capsule:process": declares 1.0 but the module imports "capsule:process/host@1.1.0"`},
		{"declared unserved", "noexports", "[imports]\n\"capsule:process\" = \"3.1\"\n", host.ErrImport,
			`/Capsule.toml:7: imports."capsule:process": version 3.1 is not served ` + served},
		{"no tool exports", "noexports", "", host.ErrExport,
			`capsule "x": the module does not export "capsule:guest/tool@1.0.0#describe"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := capsuleDir(t, "x", "testdata/imports/"+tc.wasm+".wasm", tc.extra)
			_, err := e.h.Load(context.Background(), dir)
			msg := strings.ReplaceAll(tc.msg, "%DIR%", dir)
			if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), msg) {
				t.Fatalf("err =\n  %v\nwant %v containing\n  %s", err, tc.want, msg)
			}
			if _, ok := e.h.Capsule("x"); ok {
				t.Fatal("a refused capsule is loaded")
			}
		})
	}
	// A declared, served import loads past validation (then fails on the
	// missing exports: goodimport exports nothing).
	dir := capsuleDir(t, "x", "testdata/imports/goodimport.wasm", "[imports]\n\"capsule:process\" = \"1.1\"\n")
	if _, err := e.h.Load(context.Background(), dir); !errors.Is(err, host.ErrExport) {
		t.Fatalf("good import: %v", err)
	}
}

func TestLoadRefusals(t *testing.T) {
	e := newHost(t, func(c *host.Config) {
		c.HostQuotas = registry.Quotas{MaxConcurrent: 4}
		c.HostLimits = sandbox.Limits{Pids: 64}
	})
	tests := []struct {
		name, extra string
		want        error
		msg         string
	}{
		{"raise quota", "[limits]\nmax_concurrent = 16\n", host.ErrPolicy, `Capsule.toml:7: limits.max_concurrent: 16 exceeds the host's ceiling 4 (a manifest can only lower limits)`},
		{"raise limit", "[limits]\nmax_pids = 65\n", host.ErrPolicy, `Capsule.toml:7: limits.max_pids: 65 exceeds the host's ceiling 64`},
		{"raise default quota", "[limits]\nmax_retained = 33\n", host.ErrPolicy, `limits.max_retained: 33 exceeds the host's ceiling 32`},
		{"backend", "[capabilities]\nbackend = \"oci\"\n", host.ErrPolicy, `Capsule.toml:7: capabilities.backend: backend "oci" is not available on this host (available: [local])`},
		{"network", "[capabilities]\nnetwork = true\n", host.ErrPolicy, `capabilities.network: network access is not allowed on this host`},
		{"exec missing", "[capabilities]\nexec = [\"no-such-binary-xyz\"]\n", host.ErrPolicy, `capabilities.exec: "no-such-binary-xyz": not found in the host's PATH`},
		{"bad manifest", "[limits]\nmax_pids = \"many\"\n", manifest.ErrInvalid, `Capsule.toml:7: limits.max_pids: expected an integer, got string`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.h.Load(context.Background(), capsuleDir(t, "x", toolsWasm, tc.extra))
			if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.msg) {
				t.Fatalf("err =\n  %v\nwant %v containing\n  %s", err, tc.want, tc.msg)
			}
		})
	}
	// Lowering is fine, and the policy carries it.
	c := load(t, e, "ok", "[limits]\nmax_concurrent = 2\nmax_pids = 10\n[capabilities]\nexec = [\"sh\"]\n")
	p := c.Policy()
	if p.Quotas.MaxConcurrent != 2 || p.Limits.Pids != 10 || len(p.Exec) != 1 || !filepath.IsAbs(p.Exec[0]) {
		t.Fatalf("policy %+v", p)
	}
}

func TestChecksumMismatch(t *testing.T) {
	e := newHost(t, nil)
	dir := capsuleDir(t, "x", toolsWasm, "")
	if err := os.WriteFile(filepath.Join(dir, "guest.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := e.h.Load(context.Background(), dir)
	if !errors.Is(err, host.ErrChecksum) || !strings.Contains(err.Error(), "Capsule.toml:5: capsule.sha256: module guest.wasm has sha256 ") {
		t.Fatalf("err = %v", err)
	}
}

func TestEngineSelection(t *testing.T) {
	reg := newRegistry(t)
	_, err := host.New(context.Background(), host.Config{Engine: "wasmtime", Registry: reg, StateDir: t.TempDir()})
	if len(host.Engines()) == 1 {
		if !errors.Is(err, host.ErrEngine) || !strings.Contains(err.Error(), "go build -tags wasmtime") {
			t.Fatalf("err = %v", err)
		}
	}
	_, err = host.New(context.Background(), host.Config{Engine: "v8", Registry: reg, StateDir: t.TempDir()})
	if !errors.Is(err, host.ErrEngine) || !strings.Contains(err.Error(), `unknown engine "v8"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestRemove(t *testing.T) {
	e := newHost(t, nil)
	load(t, e, "tools", "")
	if err := e.h.Remove(context.Background(), "tools"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.h.Call(context.Background(), "tools", "noop", "{}"); !errors.Is(err, host.ErrUnknownCapsule) {
		t.Fatalf("after remove: %v", err)
	}
	if err := e.h.Remove(context.Background(), "tools"); !errors.Is(err, host.ErrUnknownCapsule) {
		t.Fatalf("second remove: %v", err)
	}
}

// Reload swaps the module while calls keep succeeding.
func TestReloadUnderLoad(t *testing.T) {
	e := newHost(t, nil)
	dir := capsuleDir(t, "tools", toolsWasm, "[pool]\nmin_idle = 2\nmax = 4\n")
	if _, err := e.h.Load(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	stop := testutil.Repeat(4, func() bool {
		if _, err := e.h.Call(context.Background(), "tools", "noop", "{}"); err != nil {
			t.Error(err)
			return false
		}
		return true
	})
	defer stop()
	for i := 0; i < 5; i++ {
		if _, err := e.h.Load(context.Background(), dir); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	if n := len(e.h.Capsules()); n != 1 {
		t.Fatalf("%d capsules", n)
	}
}

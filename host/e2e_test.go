package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/registry"
)

const testcapDir = "../capsules/testcap"

// testcapCopy copies the committed conformance capsule into a temporary
// directory with min_idle = 3, so consecutive calls provably rotate
// across three warm instances.
func testcapCopy(t *testing.T) string {
	t.Helper()
	wasm, err := os.ReadFile(testcapDir + "/testcap.wasm")
	if err != nil {
		t.Fatalf("the committed conformance capsule is missing (run capsules/build.sh testcap): %v", err)
	}
	m, err := os.ReadFile(testcapDir + "/Capsule.toml")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^min_idle = \d+$`)
	if !re.Match(m) {
		t.Fatalf("testcap's manifest has no [pool] min_idle line to raise")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "testcap.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Capsule.toml"), re.ReplaceAll(m, []byte("min_idle = 3")), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadTestcap(t *testing.T, e *env, dir string) *host.Capsule {
	t.Helper()
	c, err := e.h.Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.Stats().Idle >= c.Manifest.Pool.MinIdle })
	return c
}

// call runs a testcap tool and decodes its {"ok": ...} / {"error": ...}.
func call(t *testing.T, e *env, ctx context.Context, tool, input string) (map[string]any, uint64) {
	t.Helper()
	r, err := e.h.Call(ctx, "testcap", tool, input)
	if err != nil {
		t.Fatalf("%s %s: %v", tool, input, err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(r.Output), &out); err != nil {
		t.Fatalf("%s: output %q: %v", tool, r.Output, err)
	}
	return out, r.Instance
}

func TestTestcapEndToEnd(t *testing.T) {
	e := newHost(t, nil)
	c := loadTestcap(t, e, testcapDir)
	if len(c.Tools()) < 10 {
		t.Fatalf("testcap describes %d tools", len(c.Tools()))
	}
	ctx := host.WithPrincipal(context.Background(), "alice")
	r, err := e.h.Call(ctx, "testcap", "echo", `{"hello":"world"}`)
	if err != nil || !strings.Contains(r.Output, `"hello":"world"`) {
		t.Fatalf("echo: %+v %v", r, err)
	}
	out, _ := call(t, e, ctx, "spawn", `{"cmd":"/bin/echo","args":["hi"]}`)
	t.Logf("spawn: %v", out)
	if out["ok"] == nil {
		t.Fatalf("spawn: %v", out)
	}
	_, err = e.h.Call(ctx, "testcap", "fail", `{"message":"nope"}`)
	var te *host.ToolError
	if !errors.As(err, &te) || !strings.Contains(te.Message, "nope") {
		t.Fatalf("fail: %v", err)
	}
}

// A persistent process belongs to the capsule, not the instance: it is
// seen from other instances, survives a reload of the capsule, and is
// stopped when the capsule is removed.
func TestReloadKeepsProcesses(t *testing.T) {
	e := newHost(t, nil)
	dir := testcapCopy(t)
	loadTestcap(t, e, dir)
	ctx := host.WithPrincipal(context.Background(), "alice")
	out, inst1 := call(t, e, ctx, "spawn_persistent", `{"request":{"cmd":"/bin/sleep","args":["30"]}}`)
	id, ok := out["ok"].(string)
	if !ok || len(id) != 52 {
		t.Fatalf("spawn_persistent: %v", out)
	}
	st, inst2 := call(t, e, ctx, "status", `{"id":"`+id+`"}`)
	if inst2 == inst1 {
		t.Fatalf("consecutive calls on one instance %d", inst1)
	}
	t.Logf("status: %v", st)
	if st["ok"] == nil {
		t.Fatalf("status from another instance: %v", st)
	}
	loadTestcap(t, e, dir) // reload: new module, new pool
	st, inst3 := call(t, e, ctx, "status", `{"id":"`+id+`"}`)
	info, _ := st["ok"].(map[string]any)
	if info == nil || info["exit"] != nil || inst3 == inst1 || inst3 == inst2 {
		t.Fatalf("after reload (instance %d): %v", inst3, st)
	}
	if _, err := e.reg.OperatorStatus(id); err != nil {
		t.Fatalf("operator status before remove: %v", err)
	}
	if err := e.h.Remove(context.Background(), "testcap"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.OperatorStatus(id); !errors.Is(err, registry.ErrNoSuchProcess) {
		t.Fatalf("after remove: %v", err)
	}
}

// When an instance goes back to the pool its handles are dropped with
// their semantics: an ephemeral (spawn-background) process is reaped ...
func TestInstanceResetReapsEphemeral(t *testing.T) {
	e := newHost(t, nil)
	loadTestcap(t, e, testcapCopy(t))
	ctx := host.WithPrincipal(context.Background(), "alice")
	out, _ := call(t, e, ctx, "spawn_background_ops", `{"request":{"cmd":"/bin/sleep","args":["30"]},"ops":[{"op":"os_pid"}],"keep_handle":true}`)
	pid := findPid(t, out)
	waitFor(t, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
}

// ... and an attached persistent one is only detached.
func TestInstanceResetDetachesAttached(t *testing.T) {
	e := newHost(t, nil)
	loadTestcap(t, e, testcapCopy(t))
	ctx := host.WithPrincipal(context.Background(), "alice")
	out, _ := call(t, e, ctx, "spawn_persistent", `{"request":{"cmd":"/bin/sleep","args":["30"]}}`)
	id := out["ok"].(string)
	out, _ = call(t, e, ctx, "attach_ops", `{"id":"`+id+`","ops":[{"op":"os_pid"}],"keep_handle":true}`)
	pid := findPid(t, out)
	time.Sleep(200 * time.Millisecond)
	st, _ := call(t, e, ctx, "status", `{"id":"`+id+`"}`)
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("attached persistent process %d died with the instance reset: %v\nstatus: %v", pid, err, st)
	}
	if info, _ := st["ok"].(map[string]any); info == nil || info["phase"] != "running" {
		t.Fatalf("status after reset: %v", st)
	}
}

// findPid digs the os_pid op's value out of an *_ops tool reply.
func findPid(t *testing.T, out map[string]any) int {
	t.Helper()
	b, _ := json.Marshal(out)
	var r struct {
		OK struct {
			Results []map[string]any `json:"results"`
		} `json:"ok"`
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.OK.Results) == 0 {
		t.Fatalf("no op results in %s", b)
	}
	rb, _ := json.Marshal(r.OK.Results[0])
	m := regexp.MustCompile(`[0-9]{2,}`).Find(rb)
	if m == nil {
		t.Fatalf("no pid in %s", rb)
	}
	pid, _ := strconv.Atoi(string(m))
	return pid
}

// The owner-fallback principal (a call without one) cannot hold
// persistent processes: the principal really travels into the registry.
func TestFallbackPrincipalReachesRegistry(t *testing.T) {
	e := newHost(t, nil)
	loadTestcap(t, e, testcapDir)
	out, _ := call(t, e, context.Background(), "spawn_persistent", `{"request":{"cmd":"/bin/sleep","args":["30"]}}`)
	b, _ := json.Marshal(out)
	if !strings.Contains(string(b), "persist-unsupported") {
		t.Fatalf("fallback principal spawn_persistent: %s", b)
	}
}

// A call interrupted at its deadline while blocked in a host function
// (wait) is reported as a timeout, its instance is discarded, and the
// persistent process it was waiting on is untouched.
func TestTimeoutInHostCallSparesPersistent(t *testing.T) {
	e := newHost(t, func(c *host.Config) { c.CallTimeout = 400 * time.Millisecond })
	c := loadTestcap(t, e, testcapCopy(t))
	ctx := host.WithPrincipal(context.Background(), "alice")
	out, _ := call(t, e, ctx, "spawn_persistent", `{"request":{"cmd":"/bin/sleep","args":["30"]}}`)
	id := out["ok"].(string)
	start := time.Now()
	_, err := e.h.Call(ctx, "testcap", "wait", `{"id":"`+id+`","timeout_ms":20000}`)
	var te *host.TimeoutError
	if !errors.As(err, &te) || te.Tool != "wait" {
		t.Fatalf("wait past the deadline: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("interrupt took %v", d)
	}
	if st := c.Stats(); st.Discarded != 1 {
		t.Fatalf("the interrupted instance was not discarded: %+v", st)
	}
	st, _ := call(t, e, ctx, "status", `{"id":"`+id+`"}`)
	if info, _ := st["ok"].(map[string]any); info == nil || info["phase"] != "running" {
		t.Fatalf("persistent process after the timeout: %v", st)
	}
}

// Reaping an ephemeral process must not touch a process started after
// it. Regression: the local backend reused a pooled cgroup that had seen
// cgroup.kill, and the next process cloned into it was killed at birth.
func TestEphemeralReapSparesNextProcess(t *testing.T) {
	e := newHost(t, nil)
	loadTestcap(t, e, testcapDir)
	ctx := host.WithPrincipal(context.Background(), "alice")
	out, _ := call(t, e, ctx, "spawn_background_ops", `{"request":{"cmd":"/bin/sleep","args":["30"]},"ops":[{"op":"kill"}]}`)
	if out["ok"] == nil {
		t.Fatalf("spawn_background_ops: %v", out)
	}
	out, _ = call(t, e, ctx, "spawn_persistent", `{"request":{"cmd":"/bin/sleep","args":["30"]}}`)
	id := out["ok"].(string)
	time.Sleep(500 * time.Millisecond)
	st, _ := call(t, e, ctx, "status", `{"id":"`+id+`"}`)
	if info, _ := st["ok"].(map[string]any); info == nil || info["phase"] != "running" {
		t.Fatalf("a persistent process started after an ephemeral one was killed died within 500 ms: %v", st)
	}
}

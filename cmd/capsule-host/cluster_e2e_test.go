//go:build !leanclient

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/registry/etcddir/etcdtest"
)

// clusterNode is one daemon of a test cluster.
type clusterNode struct {
	name string
	dir  string
	peer string // its node-to-node address
	key  string // the cluster key file
	bin  string
	d    *daemonProc
	c    *api.Client
}

// restart starts the node's daemon again on its state and config.
func (n *clusterNode) restart(t testing.TB) {
	t.Helper()
	n.d = startServe(t, n.bin, n.dir, "--on-shutdown", "stop")
	awaitServing(t, n.c, n.d)
}

func freePeerAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startCluster runs one daemon per name on one real etcd, all with the
// same cluster key, a lease TTL of ttl and the test's quotas.
func startCluster(t testing.TB, names []string, ttl string, clusterTOML ...string) ([]*clusterNode, *etcdtest.Cluster, string) {
	t.Helper()
	bin := builtBinary(t)
	ec := etcdtest.Start(t, 1)
	ns, mark := startClusterOn(t, bin, ec, names, ttl, clusterTOML...)
	return ns, ec, mark
}

// startClusterOn is startCluster on a given etcd.
func startClusterOn(t testing.TB, bin string, ec *etcdtest.Cluster, names []string, ttl string, clusterTOML ...string) ([]*clusterNode, string) {
	t.Helper()
	return startClusterTop(t, bin, ec, names, ttl, "", clusterTOML...)
}

// startClusterTop is startClusterOn with top-level configuration (keys
// before the first table, then tables) ahead of the cluster's.
func startClusterTop(t testing.TB, bin string, ec *etcdtest.Cluster, names []string, ttl, top string, clusterTOML ...string) ([]*clusterNode, string) {
	t.Helper()
	root := t.TempDir()
	var secret [32]byte
	rand.Read(secret[:])
	key := filepath.Join(root, "cluster.key")
	if err := os.WriteFile(key, []byte(hex.EncodeToString(secret[:])), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("cluster-%d", time.Now().UnixNano())
	t.Cleanup(func() { stopMarked(t, mark) })
	var ns []*clusterNode
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range ns {
				b, _ := os.ReadFile(filepath.Join(n.dir, "daemon.log"))
				t.Logf("daemon %s log:\n%s", n.name, b)
			}
		}
	})
	for _, n := range names {
		dir := filepath.Join(root, n)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		peer := freePeerAddr(t)
		toml := top + fmt.Sprintf("\n[quotas]\nmax_concurrent = 8\nmax_retained = 32\n\n[cluster]\nurl = %q\nnode = %q\nkey_file = %q\nlease_ttl = %q\nlisten = %q\n", ec.URL()+"/e2e", n, key, ttl, peer) + strings.ReplaceAll(strings.Join(clusterTOML, "\n"), "{node}", n)
		if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(toml), 0o600); err != nil {
			t.Fatal(err)
		}
		cn := &clusterNode{name: n, dir: dir, peer: peer, key: key, bin: bin, c: api.NewUnix(filepath.Join(dir, "d.sock"))}
		cn.restart(t)
		ns = append(ns, cn)
	}
	return ns, mark
}

// stopCluster ends every node (SIGTERM: its processes are stopped) and
// waits, bounded, until none of the test's processes is left.
func stopCluster(t testing.TB, ns []*clusterNode, mark string) {
	t.Helper()
	for _, n := range ns {
		endServe(t, n.d)
	}
	waitNoMarked(t, mark, 30*time.Second)
}

// noSuchProcess starts toolErr's answer for the shell's typed
// no-such-process (tool_code), whatever the message says.
const noSuchProcess = api.CodeToolError + " (" + api.CodeNoSuchProcess + "):"

// toolErr calls a shell tool and returns the daemon's error as the CLI
// prints it ("code (tool_code): message"), "" on success.
func toolErr(t testing.TB, c *api.Client, principal, tool string, in any) (map[string]any, string) {
	t.Helper()
	m, ae := toolCall(t, c, principal, tool, in)
	switch {
	case ae == nil:
		return m, ""
	case ae.ToolCode != "":
		return nil, ae.Code + " (" + ae.ToolCode + "): " + ae.Message
	}
	return nil, ae.Code + ": " + ae.Message
}

// toolCall calls a shell tool, bounded by a minute: its output, or the
// daemon's typed error (ToolCode is the tool's error code).
func toolCall(t testing.TB, c *api.Client, principal, tool string, in any) (map[string]any, *api.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return toolCallCtx(t, ctx, c, principal, tool, in)
}

// toolCallCtx is toolCall bounded by ctx; a call ctx ends is a test
// failure (no answer within the bound).
func toolCallCtx(t testing.TB, ctx context.Context, c *api.Client, principal, tool string, in any) (map[string]any, *api.Error) {
	t.Helper()
	b, _ := json.Marshal(in)
	res, err := c.Call(ctx, api.CallRequest{Capsule: "shell", Tool: tool, Input: b, Principal: principal})
	var ae *api.Error
	if errors.As(err, &ae) {
		return nil, ae
	}
	if err != nil && ctx.Err() != nil {
		t.Fatalf("%s: no answer within its bound: %v", tool, err)
	}
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	m := map[string]any{}
	json.Unmarshal(res.Output, &m)
	return m, nil
}

// settleShells polls, bounded, until exactly want of the test's shells
// are alive in two reads 100 ms apart. One read is not enough either way:
// a spawn answers once bwrap started and the sandboxed shell shows up a
// moment later, and a shell's fork runs under the shell's own command
// line until it execs (a loaded run counted 10 for 8 that way). A stray
// stays, so a count that never settles at want is still caught.
func settleShells(t testing.TB, mark string, want int) {
	t.Helper()
	var alive []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		prev := len(alive)
		alive = shells(withMarker(mark))
		if len(alive) == want && prev == want {
			return
		}
	}
	t.Fatalf("%d processes alive, want %d: %q", len(alive), want, alive)
}

// TestClusterThreeDaemons: three daemons on one etcd. `nodes` lists them;
// 100 concurrent spawns spread across the three against a cap of 8 start
// exactly 8 processes; a process is known on every node (held elsewhere:
// unavailable naming its node, never no-such-process) and another
// principal gets no-such-process on every node.
func TestClusterThreeDaemons(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	ns, _, mark := startCluster(t, []string{"a", "b", "c"}, "5s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := ns[0].c.Nodes(ctx)
	if err != nil || len(l.Nodes) != 3 || l.Nodes[0].Name != "a" || !l.Nodes[0].Self || l.Nodes[2].Name != "c" {
		t.Fatalf("nodes: %+v %v", l, err)
	}
	if h, err := ns[1].c.Health(ctx); err != nil || h.Cluster != "ok (node b)" {
		t.Fatalf("health: %+v %v", h, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	var holders []int
	var refused []*api.Error
	for i := range 100 {
		wg.Go(func() {
			m, ae := toolCall(t, ns[i%3].c, "alice", "spawn_background_process", map[string]any{"command": "sleep 1000 # " + mark})
			mu.Lock()
			defer mu.Unlock()
			if ae != nil {
				refused = append(refused, ae)
				return
			}
			id, _ := m["id"].(string)
			ids, holders = append(ids, id), append(holders, i%3)
		})
	}
	wg.Wait()
	quota := 0
	for _, ae := range refused {
		if ae.Code == api.CodeToolError && ae.ToolCode == "quota" {
			quota++
		} else {
			t.Errorf("a refusal that is not quota: %s (%s): %s", ae.Code, ae.ToolCode, ae.Message)
		}
	}
	if len(ids) != 8 || len(refused) != 92 || quota != 92 {
		t.Fatalf("%d spawned, %d refused (%d of them quota), want 8 and 92 quota", len(ids), len(refused), quota)
	}
	t.Logf("a refusal: %s (%s): %s", refused[0].Code, refused[0].ToolCode, refused[0].Message)
	settleShells(t, mark, 8)
	h := holders[0]
	for _, n := range ns {
		if _, e := toolErr(t, n.c, "mallory", "read_process_logs", map[string]any{"id": ids[0]}); !strings.HasPrefix(e, noSuchProcess) {
			t.Errorf("another principal through %s: %q, want no-such-process", n.name, e)
		}
		if m, e := toolErr(t, n.c, "alice", "read_process_logs", map[string]any{"id": ids[0]}); e != "" || m["running"] != true {
			t.Errorf("the owner through %s of a process held by %s: %v %q", n.name, ns[h].name, m, e)
		}
	}
	stopCluster(t, ns, mark)
}

// TestClusterRouting: a process spawned through node A is read with a
// cursor, written to and stopped through B and C; processes on A are
// signalled through B and waited for through C (the conformance capsule
// testcap calls signal and wait as they are): the wait sees the exit the
// signal caused. A forged node-to-node call (wrong token) is refused; A's
// log audits the forwarded calls.
func TestClusterRouting(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	ns, mark := startClusterTop(t, builtBinary(t), etcdtest.Start(t, 1), []string{"a", "b", "c"}, "5s",
		fmt.Sprintf("capsules = [%q]\n", bwrapTestcap(t)))
	a, b, c := ns[0], ns[1], ns[2]
	m, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "cat # " + mark, "keep_stdin_open": true})
	if e != "" {
		t.Fatal(e)
	}
	id := m["id"].(string)
	if _, e := toolErr(t, c.c, "alice", "write_process_stdin", map[string]any{"id": id, "data": "one\n"}); e != "" {
		t.Fatalf("write through c: %s", e)
	}
	var got, cursor string
	for end := time.Now().Add(30 * time.Second); !strings.Contains(got, "one\n"); time.Sleep(50 * time.Millisecond) {
		m, e = toolErr(t, b.c, "alice", "read_process_logs", map[string]any{"id": id, "stream": "stdout"})
		if e != "" || time.Now().After(end) {
			t.Fatalf("read through b: %v %q", m, e)
		}
		got, _ = m["stdout"].(string)
		cursor, _ = m["cursor"].(string)
	}
	if _, e := toolErr(t, b.c, "alice", "write_process_stdin", map[string]any{"id": id, "data": "two\n"}); e != "" {
		t.Fatalf("write through b: %s", e)
	}
	got = ""
	for end := time.Now().Add(30 * time.Second); got == ""; time.Sleep(50 * time.Millisecond) {
		m, e = toolErr(t, c.c, "alice", "read_process_logs", map[string]any{"id": id, "stream": "stdout", "cursor": cursor})
		if e != "" || time.Now().After(end) {
			t.Fatalf("read from b's cursor through c: %v %q", m, e)
		}
		got, _ = m["stdout"].(string)
	}
	if got != "two\n" {
		t.Fatalf("from the cursor through c: %q, want exactly the bytes after it", got)
	}
	for _, n := range ns {
		if _, e := toolErr(t, n.c, "mallory", "write_process_stdin", map[string]any{"id": id, "data": "x"}); !strings.HasPrefix(e, noSuchProcess) {
			t.Errorf("mallory writing through %s: %q, want no-such-process", n.name, e)
		}
	}
	if _, e := toolErr(t, b.c, "alice", "kill_process", map[string]any{"id": id, "grace_ms": 0}); e != "" {
		t.Fatalf("stop through b: %s", e)
	}
	if m, e := toolErr(t, c.c, "alice", "read_process_logs", map[string]any{"id": id}); e != "" || m["running"] != false {
		t.Fatalf("after the stop, through c: %v %q", m, e)
	}
	crossSignalWait(t, a, b, c, mark)
	// A forged node-to-node call: the right shape, a wrong token.
	body := fmt.Sprintf(`{"op":"stop","caller":{"Capsule":"shell","Principal":"alice"},"id":%q}`, id)
	req, _ := http.NewRequest("POST", "http://"+a.peer+"/v1/peer/call", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer forged")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged call: HTTP %d, want 401", resp.StatusCode)
	}
	// a's audit log has a line per forwarded call: who sent it, for whom,
	// what, and the outcome.
	log, _ := os.ReadFile(filepath.Join(a.dir, "daemon.log"))
	for _, want := range [][]string{{"from=c", "op=write-stdin"}, {"from=b", "op=stop"}, {"from=b", "op=signal"}, {"from=c", "op=wait"}} {
		found := false
		for _, ln := range strings.Split(string(log), "\n") {
			if strings.Contains(ln, `msg="cluster audit: forwarded call served"`) && strings.Contains(ln, want[0]) && strings.Contains(ln, want[1]) &&
				strings.Contains(ln, "principal=alice") && strings.Contains(ln, "result=ok") && strings.Contains(ln, "proc=") {
				found = true
			}
		}
		if !found {
			t.Errorf("a's log has no audit line %v for alice, result ok:\n%s", want, log)
		}
	}
	stopCluster(t, ns, mark)
}

// bwrapTestcap is a copy of the conformance capsule testcap in a bwrap
// sandbox (local is not enabled by default), warming one instance.
func bwrapTestcap(t *testing.T) string {
	t.Helper()
	dst := capsuleCopy(t, "testcap")
	p := filepath.Join(dst, "Capsule.toml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer(`backend = "local"`, `backend = "bwrap"`, "min_idle = 3", "min_idle = 1").Replace(string(b))
	if !strings.Contains(s, `backend = "bwrap"`) {
		t.Fatalf("%s: no backend line to rewrite", p)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// crossSignalWait: two processes held by a, each signalled through b and
// waited for through c with testcap's signal and wait tools (the
// registry's Signal and Wait, forwarded). A shell that traps USR1 exits 7
// when, and only when, USR1 reaches it: a wait through c before the
// signal times out (wait-timeout, the forwarded timeout honoured),
// another principal's signal through b is no-such-process, and after
// alice's the wait through c returns exit code 7. A sleep sent HUP
// through b is seen through c as ended by signal 1.
func crossSignalWait(t *testing.T, a, b, c *clusterNode, mark string) {
	t.Helper()
	tc := func(n *clusterNode, principal, tool string, in any) (map[string]any, string) {
		t.Helper()
		return capsuleCall(t, n.c, "testcap", principal, tool, in)
	}
	spawn := func(script string) string {
		t.Helper()
		m, code := tc(a, "alice", "spawn_persistent", map[string]any{"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", script + " # " + mark}}})
		id, _ := m["ok"].(string)
		if code != "" || id == "" {
			t.Fatalf("testcap spawn through a: %v %q", m, code)
		}
		return id
	}
	exitThroughC := func(id string) map[string]any {
		t.Helper()
		m, code := tc(c, "alice", "wait", map[string]any{"id": id, "timeout_ms": 30000})
		ex, _ := m["ok"].(map[string]any)
		if code != "" || ex == nil {
			t.Fatalf("wait through c: %v %q", m, code)
		}
		return ex
	}
	trapped := spawn(`trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.1; done`)
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m, code := tc(c, "alice", "read_since", map[string]any{"id": trapped, "stream": "stdout", "max": 4096})
		var chunk struct{ Data []byte }
		if ok, _ := json.Marshal(m["ok"]); code == "" {
			json.Unmarshal(ok, &chunk)
		}
		if strings.Contains(string(chunk.Data), "ready") {
			break
		}
		if code != "" || time.Now().After(end) {
			t.Fatalf("read through c of the trapping shell: %v %q", m, code)
		}
	}
	if m, code := tc(c, "alice", "wait", map[string]any{"id": trapped, "timeout_ms": 300}); code != "wait-timeout" {
		t.Fatalf("wait through c before any signal: %v %q, want wait-timeout", m, code)
	}
	if m, code := tc(b, "mallory", "signal", map[string]any{"id": trapped, "sig": "usr1"}); code != api.CodeNoSuchProcess {
		t.Fatalf("mallory's signal through b: %v %q, want no-such-process", m, code)
	}
	if m, code := tc(b, "alice", "signal", map[string]any{"id": trapped, "sig": "usr1"}); code != "" {
		t.Fatalf("signal through b: %v %q", m, code)
	}
	if ex := exitThroughC(trapped); ex["exit_code"] != float64(7) || ex["signal"] != nil {
		t.Fatalf("the trapping shell's exit through c: %v, want exit code 7 (its USR1 trap ran)", ex)
	}
	hup := spawn("exec sleep 1000")
	if m, code := tc(b, "alice", "signal", map[string]any{"id": hup, "sig": "hup"}); code != "" {
		t.Fatalf("hup through b: %v %q", m, code)
	}
	if ex := exitThroughC(hup); ex["signal"] != float64(1) || ex["exit_code"] != nil {
		t.Fatalf("the sleep's exit through c: %v, want signal 1 (HUP)", ex)
	}
}

// TestClusterFaults: kill -9 node B: its process answers unavailable
// naming b through A (never no-such-process) while A's own process is
// untouched; B restarts on its state and its process is reachable again
// with gapless output. Then etcd stops: A's process keeps serving, a new
// spawn is unavailable and health says degraded; etcd returns and spawns
// work again.
func TestClusterFaults(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	ns, ec, mark := startCluster(t, []string{"a", "b"}, "10s")
	a, b := ns[0], ns[1]
	counter := fmt.Sprintf(`i=0; while true; do i=$((i+1)); echo "%s $i"; sleep 0.2; done`, mark)
	spawn := func(n *clusterNode) string {
		m, e := toolErr(t, n.c, "alice", "spawn_background_process", map[string]any{"command": counter})
		if e != "" {
			t.Fatalf("spawn through %s: %s", n.name, e)
		}
		return m["id"].(string)
	}
	idA, idB := spawn(a), spawn(b)
	t0 := time.Now()
	b.d.cmd.Process.Signal(syscall.SIGKILL)
	<-b.d.exited
	// Answered before b's lease can expire (after it, the answer would be
	// "lost"): the call is bounded by the TTL from the kill, and a call
	// the bound ends fails the test as one that hung.
	ttlCtx, cancel := context.WithDeadline(context.Background(), t0.Add(10*time.Second))
	_, ae := toolCallCtx(t, ttlCtx, a.c, "alice", "read_process_logs", map[string]any{"id": idB})
	cancel()
	t.Logf("b's process through a, %v after b's kill: %+v", time.Since(t0), ae)
	if ae == nil || ae.Code != api.CodeToolError || ae.ToolCode != "unavailable" || !strings.Contains(ae.Message, `node "b"`) {
		t.Fatalf("b's process through a with b down: %+v, want tool code unavailable naming node \"b\"", ae)
	}
	if _, e := toolErr(t, a.c, "alice", "read_process_logs", map[string]any{"id": idA}); e != "" {
		t.Fatalf("a's own process with b down: %s", e)
	}
	b.restart(t)
	t.Logf("b serving again %v after its kill (lease TTL 10 s)", time.Since(t0))
	text := readAllLogs(t, a.c, "alice", idB)
	if last := counterLines(t, "b's process through a after b's restart", mark, text, 1); last < 2 {
		t.Fatalf("b's process counted to %d", last)
	}

	ec.Kill(ec.Members[0])
	t1 := time.Now()
	if m, e := toolErr(t, a.c, "alice", "read_process_logs", map[string]any{"id": idA}); e != "" || m["running"] != true {
		t.Fatalf("a's own process with etcd down: %v %q", m, e)
	}
	if _, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "sleep 1000 # " + mark}); e == "" || !strings.Contains(e, "unavailable") {
		t.Fatalf("spawn with etcd down: %q, want unavailable", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	h, err := a.c.Health(ctx)
	cancel()
	if err != nil || !strings.HasPrefix(h.Cluster, "degraded") {
		t.Fatalf("health with etcd down: %+v %v", h, err)
	}
	ec.Restart(ec.Members[0])
	t.Logf("etcd back %v after its kill (lease TTL 10 s)", time.Since(t1))
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "sleep 1000 # " + mark})
		if e == "" {
			t.Logf("spawn works again %v after etcd's kill", time.Since(t1))
			break
		}
		if time.Now().After(end) {
			t.Fatalf("spawn 60 s after etcd returned: %s", e)
		}
	}
	stopCluster(t, ns, mark)
}

// TestClusterPlacement: three daemons with room for 2 processes each.
// Six spawns through a: two stay on a, four are placed on b and c; the
// seventh is refused (registry-full: no node has room) with no stray
// process. list_processes through any node shows the caller's six (the
// holders are asked); another principal sees none; `ps` on c lists all
// six with a NODE column, two per node.
func TestClusterPlacement(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	ns, _, mark := startCluster(t, []string{"a", "b", "c"}, "5s", "capacity = 2")
	a, c := ns[0], ns[2]
	for i := range 6 {
		if _, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "sleep 1000 # " + mark}); e != "" {
			t.Fatalf("spawn %d through a: %s", i+1, e)
		}
	}
	_, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "sleep 1000 # " + mark})
	if !strings.Contains(e, "registry-full") {
		t.Fatalf("7th spawn: %q, want registry-full (no node has room)", e)
	}
	t.Logf("7th spawn: %s", e)
	settleShells(t, mark, 6)
	for _, n := range ns {
		m, e := toolErr(t, n.c, "alice", "list_processes", map[string]any{})
		if l, _ := m["processes"].([]any); e != "" || len(l) != 6 {
			t.Fatalf("alice's list through %s: %d processes, %q; want 6", n.name, len(l), e)
		}
		m, e = toolErr(t, n.c, "mallory", "list_processes", map[string]any{})
		if l, _ := m["processes"].([]any); e != "" || len(l) != 0 {
			t.Fatalf("mallory's list through %s: %d processes, %q; want none", n.name, len(l), e)
		}
	}
	out, errOut, code := runCLI(t, "", "ps", "--socket", filepath.Join(c.dir, "d.sock"))
	if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(strings.SplitN(out, "\n", 2)[0], "NODE") {
		t.Fatalf("ps on c: exit %d, %q %q", code, out, errOut)
	}
	per := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 2 {
			per[f[1]]++
		}
	}
	if len(per) != 3 || per["a"] != 2 || per["b"] != 2 || per["c"] != 2 {
		t.Fatalf("ps on c, processes per node %v, want 2 on each:\n%s", per, out)
	}
	stopCluster(t, ns, mark)
}

// testCA is a cluster CA for the mTLS test: it signs node certificates
// whose DNS name is the node's.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes name's certificate and key under dir as name.pem and
// name.key, and returns them as a tls.Certificate.
func (ca *testCA) issue(t *testing.T, dir, name string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClusterMTLS: with [cluster] tls_ca/tls_cert/tls_key the nodes talk
// mutual TLS: a process spawned through a is written to and read through
// b. A peer call over plain HTTP, without a client certificate, with a
// certificate from another CA, or with a good certificate that names
// another node than the one it claims, is refused.
func TestClusterMTLS(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	certs := t.TempDir()
	ca := newTestCA(t)
	if err := os.WriteFile(filepath.Join(certs, "ca.pem"), ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	ca.issue(t, certs, "a")
	certB := ca.issue(t, certs, "b")
	rogue := newTestCA(t).issue(t, t.TempDir(), "a")
	ns, _, mark := startCluster(t, []string{"a", "b"}, "5s",
		fmt.Sprintf("tls_ca = %q", filepath.Join(certs, "ca.pem")),
		fmt.Sprintf("tls_cert = %q", filepath.Join(certs, "{node}.pem")),
		fmt.Sprintf("tls_key = %q", filepath.Join(certs, "{node}.key")))
	a, b := ns[0], ns[1]
	m, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "cat # " + mark, "keep_stdin_open": true})
	if e != "" {
		t.Fatal(e)
	}
	id := m["id"].(string)
	if _, e := toolErr(t, b.c, "alice", "write_process_stdin", map[string]any{"id": id, "data": "over tls\n"}); e != "" {
		t.Fatalf("write through b over mTLS: %s", e)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m, e = toolErr(t, b.c, "alice", "read_process_logs", map[string]any{"id": id, "stream": "stdout"})
		if s, _ := m["stdout"].(string); strings.Contains(s, "over tls\n") {
			break
		}
		if e != "" || time.Now().After(end) {
			t.Fatalf("read through b over mTLS: %v %q", m, e)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	call := func(scheme string, certs []tls.Certificate, claims string) (int, error) {
		cli := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "a", Certificates: certs}}}
		defer cli.CloseIdleConnections()
		req, _ := http.NewRequest("POST", scheme+"://"+a.peer+"/v1/peer/call", strings.NewReader(`{"op":"status","caller":{"Capsule":"shell","Principal":"alice"},"id":"x"}`))
		req.Header.Set("Authorization", "Bearer forged")
		req.Header.Set("X-Capsule-Node", claims)
		resp, err := cli.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := call("http", nil, "b"); err == nil && code == http.StatusOK {
		t.Fatal("plain HTTP to an mTLS peer listener answered 200")
	}
	if _, err := call("https", nil, "b"); err == nil {
		t.Fatal("a peer call without a client certificate got an answer")
	}
	if _, err := call("https", []tls.Certificate{rogue}, "a"); err == nil {
		t.Fatal("a peer call with another CA's certificate got an answer")
	}
	if code, err := call("https", []tls.Certificate{certB}, "a"); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("b's certificate claiming to be a: %d %v, want 401", code, err)
	}
	if code, err := call("https", []tls.Certificate{certB}, "b"); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("b's certificate with a forged token: %d %v, want 401", code, err)
	}
	stopCluster(t, ns, mark)
}

// TestClusterEtcdTLS: an etcd serving https only with --client-cert-auth.
// Two daemons with [cluster] etcd_ca/etcd_cert/etcd_key join it: `nodes`
// lists both and a process spawned through a (its reservation an etcd
// transaction) is read through b (found through the directory). A third
// daemon trusting the CA but presenting no client certificate does not
// start, and says why (the handshake's alert), not only that etcd timed
// out.
func TestClusterEtcdTLS(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	ec, f := etcdtest.StartTLS(t, 1)
	etcdCA := fmt.Sprintf("etcd_ca = %q", f.CA)
	ns, mark := startClusterOn(t, bin, ec, []string{"a", "b"}, "5s", etcdCA,
		fmt.Sprintf("etcd_cert = %q", f.ClientCert), fmt.Sprintf("etcd_key = %q", f.ClientKey))
	a, b := ns[0], ns[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if l, err := b.c.Nodes(ctx); err != nil || len(l.Nodes) != 2 {
		t.Fatalf("nodes over etcd TLS: %+v %v", l, err)
	}
	m, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "echo over-etcd-tls; sleep 1000 # " + mark})
	if e != "" {
		t.Fatal(e)
	}
	id := m["id"].(string)
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m, e = toolErr(t, b.c, "alice", "read_process_logs", map[string]any{"id": id, "stream": "stdout"})
		if s, _ := m["stdout"].(string); strings.Contains(s, "over-etcd-tls") {
			break
		}
		if e != "" || time.Now().After(end) {
			t.Fatalf("a's process read through b: %v %q", m, e)
		}
	}

	dir := filepath.Join(t.TempDir(), "c")
	os.MkdirAll(dir, 0o700)
	toml, _ := os.ReadFile(filepath.Join(a.dir, "capsule-host.toml"))
	bad := strings.NewReplacer(`node = "a"`, `node = "c"`, a.peer, freePeerAddr(t)).Replace(string(toml))
	bad = bad[:strings.Index(bad, "etcd_cert")] // etcd_ca only: no client certificate
	if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startServe(t, bin, dir, "--on-shutdown", "stop")
	select {
	case <-d.exited:
	case <-time.After(90 * time.Second):
		endServe(t, d)
		t.Fatal("a daemon without an etcd client certificate did not give up within 90 s")
	}
	log, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
	if !strings.Contains(string(log), "TLS to etcd") || !strings.Contains(string(log), "bad certificate") {
		t.Fatalf("the refused daemon's log does not say why:\n%s", log)
	}
	stopCluster(t, ns, mark)
}

// TestClusterCertReload: the node-to-node TLS files are read again when
// they change, without a restart. a's rotated certificate is what new
// connections see; a changed set that does not load is refused (logged)
// and the last good one stays in use; a CA file that becomes a bundle of
// two CAs lets the second CA's certificates in. Forwarding works
// throughout.
func TestClusterCertReload(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	certs := t.TempDir()
	ca, ca2 := newTestCA(t), newTestCA(t)
	caFile := filepath.Join(certs, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	ca.issue(t, certs, "a")
	certB := ca.issue(t, certs, "b")
	rogueB := ca2.issue(t, t.TempDir(), "b")
	ns, _, mark := startCluster(t, []string{"a", "b"}, "5s", fmt.Sprintf("tls_ca = %q", caFile),
		fmt.Sprintf("tls_cert = %q", filepath.Join(certs, "{node}.pem")), fmt.Sprintf("tls_key = %q", filepath.Join(certs, "{node}.key")))
	a, b := ns[0], ns[1]
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	// probe is one new connection to a's peer listener as b with cert: the
	// serial a presented and the HTTP status (401: TLS let it in, the
	// token is forged).
	probe := func(cert tls.Certificate) (string, int, error) {
		cli := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "a", Certificates: []tls.Certificate{cert}}}}
		defer cli.CloseIdleConnections()
		req, _ := http.NewRequest("POST", "https://"+a.peer+"/v1/peer/call", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer forged")
		req.Header.Set("X-Capsule-Node", "b")
		resp, err := cli.Do(req)
		if err != nil {
			return "", 0, err
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String(), resp.StatusCode, nil
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(30 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("not within 30 s: %s", what)
			}
		}
	}
	s1, code, err := probe(certB)
	if err != nil || code != http.StatusUnauthorized {
		t.Fatalf("first probe: %d %v", code, err)
	}
	ca.issue(t, certs, "a")
	var s2 string
	until("a presents its rotated certificate", func() bool {
		s2, code, err = probe(certB)
		return err == nil && s2 != s1
	})
	refusals := func() int {
		log, _ := os.ReadFile(filepath.Join(a.dir, "daemon.log"))
		return strings.Count(string(log), "certificate files were refused") // a half-written pair counts too
	}
	before := refusals()
	if err := os.WriteFile(filepath.Join(certs, "a.pem"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	until("a refuses a broken certificate file and says so", func() bool {
		if s, _, err := probe(certB); err != nil || s != s2 {
			t.Fatalf("after a broken rewrite a presents %q (%v), want the last good %q", s, err, s2)
		}
		return refusals() > before
	})
	ca.issue(t, certs, "a")
	if _, _, err := probe(rogueB); err == nil {
		t.Fatal("a certificate of a CA not in tls_ca got an answer")
	}
	if err := os.WriteFile(caFile, append(append([]byte{}, ca.pem...), ca2.pem...), 0o600); err != nil {
		t.Fatal(err)
	}
	until("a trusts the second CA of the bundle", func() bool {
		_, code, err := probe(rogueB)
		return err == nil && code == http.StatusUnauthorized
	})
	m, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "echo rotated; sleep 1000 # " + mark})
	if e != "" {
		t.Fatal(e)
	}
	until("a's process read through b after the rotations", func() bool {
		m, e := toolErr(t, b.c, "alice", "read_process_logs", map[string]any{"id": m["id"], "stream": "stdout"})
		if e != "" {
			t.Fatalf("read through b: %s", e)
		}
		s, _ := m["stdout"].(string)
		return strings.Contains(s, "rotated")
	})
	stopCluster(t, ns, mark)
}

// TestClusterMemberLoss: two daemons on a three-member etcd whose leader
// is killed. Nothing changes for the daemons: a process spawned through a
// after the kill is read through b (a directory lookup, then the
// forwarded read), spawns succeed through both (etcd transactions on the
// surviving majority), and for three lease TTLs both report "ok" health,
// `nodes` lists both, and neither loses its lease (the lease each
// persisted is the one it started with; no "lease lost" in the logs).
func TestClusterMemberLoss(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	ec := etcdtest.Start(t, 3)
	ns, mark := startClusterOn(t, builtBinary(t), ec, []string{"a", "b"}, "5s")
	a, b := ns[0], ns[1]
	leaseOf := func(n *clusterNode) string {
		l, err := os.ReadFile(filepath.Join(n.dir, "state", "cluster-lease"))
		if err != nil || len(l) == 0 {
			t.Fatalf("%s's persisted lease: %q %v", n.name, l, err)
		}
		return string(l)
	}
	leases := []string{leaseOf(a), leaseOf(b)}
	ec.Kill(ec.Leader())
	t0 := time.Now()
	spawn := func(n *clusterNode, word string) string {
		t.Helper()
		m, e := toolErr(t, n.c, "alice", "spawn_background_process", map[string]any{"command": "echo " + word + "; sleep 1000 # " + mark})
		if e != "" {
			t.Fatalf("spawn through %s with an etcd member down: %s", n.name, e)
		}
		return m["id"].(string)
	}
	readThrough := func(n *clusterNode, id, word string) {
		t.Helper()
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			m, e := toolErr(t, n.c, "alice", "read_process_logs", map[string]any{"id": id, "stream": "stdout"})
			if s, _ := m["stdout"].(string); strings.Contains(s, word) {
				return
			}
			if e != "" || time.Now().After(end) {
				t.Fatalf("read through %s with an etcd member down: %v %q", n.name, m, e)
			}
		}
	}
	readThrough(b, spawn(a, "from-a"), "from-a")
	readThrough(a, spawn(b, "from-b"), "from-b")
	t.Logf("spawned and read across nodes %v after the leader's kill", time.Since(t0))
	ttl := 5 * time.Second
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		for _, n := range ns {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			h, err := n.c.Health(ctx)
			l, lerr := n.c.Nodes(ctx)
			cancel()
			if err != nil || h.Cluster != "ok (node "+n.name+")" {
				t.Fatalf("%s's health %v after the leader's kill: %+v %v", n.name, time.Since(t0), h, err)
			}
			if lerr != nil || len(l.Nodes) != 2 {
				t.Fatalf("nodes through %s %v after the leader's kill: %+v %v", n.name, time.Since(t0), l, lerr)
			}
		}
	}
	for i, n := range ns {
		if l := leaseOf(n); l != leases[i] {
			t.Fatalf("%s's lease changed from %s to %s: it re-registered", n.name, leases[i], l)
		}
		if log, _ := os.ReadFile(filepath.Join(n.dir, "daemon.log")); strings.Contains(string(log), "cluster lease lost") {
			t.Fatalf("%s lost its lease with one etcd member down", n.name)
		}
	}
	spawn(a, "still")
	stopCluster(t, ns, mark)
}

// TestClusterCLI: the operator's side through the built binary. Node a
// joins by its config file; node b by serve's flags alone (--cluster
// etcd://.../e2e --node b --cluster-listen --cluster-key-file; its config
// has no [cluster]). `capsule-host nodes` on either lists both with their
// node-to-node addresses, marking the one that answered; b forwards (a
// process spawned through a is read through b). A daemon started without
// --cluster is the single node it always was: a spawn works and `nodes`
// there fails with invalid-request (not in cluster mode).
func TestClusterCLI(t *testing.T) {
	skipSameBinary(t)
	t.Parallel() // its own daemon, state and marker (RFC §13)
	bin := builtBinary(t)
	ec := etcdtest.Start(t, 1)
	ns, mark := startClusterOn(t, bin, ec, []string{"a"}, "5s")
	a := ns[0]
	flagNode := func(name string, flags ...string) *clusterNode {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "capsule-host.toml"), []byte("[quotas]\nmax_concurrent = 8\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		n := &clusterNode{name: name, dir: dir, bin: bin, c: api.NewUnix(filepath.Join(dir, "d.sock"))}
		n.d = startServe(t, bin, dir, append([]string{"--on-shutdown", "stop"}, flags...)...)
		awaitServing(t, n.c, n.d)
		ns = append(ns, n)
		return n
	}
	bPeer := freePeerAddr(t)
	b := flagNode("b", "--cluster", ec.URL()+"/e2e", "--node", "b", "--cluster-listen", bPeer, "--cluster-key-file", a.key)
	b.peer = bPeer
	cli := func(n *clusterNode, args ...string) (string, string, error) {
		cmd := exec.Command(bin, append(args, "--socket", filepath.Join(n.dir, "d.sock"))...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + n.dir}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	for _, self := range []*clusterNode{a, b} {
		out, errOut, err := cli(self, "nodes")
		t.Logf("nodes on %s:\n%s", self.name, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err != nil || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NODE ADDRESS CAPACITY VERSION STARTED" {
			t.Fatalf("nodes on %s: %v\n%s%s", self.name, err, out, errOut)
		}
		for i, n := range []*clusterNode{a, b} {
			f := strings.Fields(lines[i+1])
			name, rest := f[0], f[1:]
			if n == self {
				if len(f) < 2 || f[1] != "*" {
					t.Fatalf("nodes on %s: %q does not mark itself", self.name, lines[i+1])
				}
				rest = f[2:]
			}
			if name != n.name || len(rest) != 4 || rest[0] != n.peer {
				t.Fatalf("nodes on %s, line %d: %q, want %s at %s", self.name, i+1, lines[i+1], n.name, n.peer)
			}
		}
	}
	m, e := toolErr(t, a.c, "alice", "spawn_background_process", map[string]any{"command": "echo via-flags; sleep 1000 # " + mark})
	if e != "" {
		t.Fatal(e)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, e := toolErr(t, b.c, "alice", "read_process_logs", map[string]any{"id": m["id"], "stream": "stdout"})
		if s, _ := r["stdout"].(string); strings.Contains(s, "via-flags") {
			break
		}
		if e != "" || time.Now().After(end) {
			t.Fatalf("a's process read through b (joined by flags): %v %q", r, e)
		}
	}
	single := flagNode("single")
	if _, e := toolErr(t, single.c, "alice", "spawn_background_process", map[string]any{"command": "sleep 1000 # " + mark}); e != "" {
		t.Fatalf("spawn on a daemon without --cluster: %s", e)
	}
	out, errOut, err := cli(single, "nodes", "--json")
	var body api.ErrorResponse
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != exitFailed || json.Unmarshal([]byte(errOut), &body) != nil || body.Error.Code != api.CodeInvalidRequest {
		t.Fatalf("nodes on a daemon without --cluster: %v, %q %q; want exit %d and invalid-request", err, out, errOut, exitFailed)
	}
	t.Logf("nodes without --cluster: %s", strings.TrimSpace(errOut))
	stopCluster(t, ns, mark)
}

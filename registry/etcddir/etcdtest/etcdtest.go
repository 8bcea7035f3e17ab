// Package etcdtest starts real etcd servers for tests: the binary Debian's
// etcd-server installs, on free loopback ports, in a temporary data
// directory, killed (and waited for) at cleanup. It is the one place tests
// of the cluster mode get an etcd from, so every test bounds its waits and
// leaves no server behind in the same way.
package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// healthBound is how long a member may take to answer /health.
const healthBound = 30 * time.Second

// Member is one etcd server process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	dir       string
	args      []string
	cmd       *exec.Cmd
	done      chan struct{}
	logPath   string
}

// Cluster is a set of members forming one etcd cluster.
type Cluster struct {
	t       testing.TB
	bin     string
	tls     *TLSFiles    // nil: plain http
	httpc   *http.Client // for /health and status, with the client certificate under TLS
	Members []*Member
}

// Binary finds the etcd binary, or "" when it is not installed.
func Binary() string {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/bin/etcd", "/usr/local/bin/etcd"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// Start runs an n-member cluster and waits until every member is healthy.
// Without the binary the test is skipped, loudly: `make deps` installs
// Debian's etcd-server.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return start(t, n, nil)
}

func start(t testing.TB, n int, f *TLSFiles) *Cluster {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("SKIP (loud): no etcd binary on PATH; install Debian's etcd-server (make deps) to run the cluster tests")
	}
	c := &Cluster{t: t, bin: bin, tls: f, httpc: &http.Client{Timeout: 2 * time.Second}}
	scheme := "http://"
	if f != nil {
		scheme = "https://"
		c.httpc.Transport = &http.Transport{TLSClientConfig: f.ClientTLS(t)}
	}
	root := t.TempDir()
	var initial []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i), dir: filepath.Join(root, fmt.Sprintf("m%d", i))}
		m.ClientURL = scheme + freeAddr(t)
		m.PeerURL = "http://" + freeAddr(t)
		m.logPath = filepath.Join(root, m.Name+".log")
		initial = append(initial, m.Name+"="+m.PeerURL)
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.args = []string{
			"--name", m.Name, "--data-dir", m.dir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "capsule-test",
			"--heartbeat-interval", "50", "--election-timeout", "500",
		}
		if f != nil {
			m.args = append(m.args, f.memberArgs()...)
		}
		c.startMember(m)
	}
	t.Cleanup(c.Stop)
	for _, m := range c.Members {
		c.WaitHealthy(m)
	}
	return c
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// URL is the etcd:// form of the cluster (the daemon's --cluster value;
// under TLS the daemon's [cluster] etcd_ca makes it https).
func (c *Cluster) URL() string {
	var hosts []string
	for _, e := range c.Endpoints() {
		_, h, _ := strings.Cut(e, "://")
		hosts = append(hosts, h)
	}
	return "etcd://" + strings.Join(hosts, ",")
}

func (c *Cluster) startMember(m *Member) {
	c.t.Helper()
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatalf("etcd log: %v", err)
	}
	cmd := exec.Command(c.bin, m.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("start etcd %s: %v", m.Name, err)
	}
	logf.Close()
	m.cmd, m.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(m.done) }()
}

// WaitHealthy polls the member's /health until it answers true, bounded.
func (c *Cluster) WaitHealthy(m *Member) {
	c.t.Helper()
	deadline := time.Now().Add(healthBound)
	for time.Now().Before(deadline) {
		select {
		case <-m.done:
			c.t.Fatalf("etcd %s exited while starting; log:\n%s", m.Name, tail(m.logPath))
		default:
		}
		if resp, err := c.httpc.Get(m.ClientURL + "/health"); err == nil {
			var b [256]byte
			n, _ := resp.Body.Read(b[:])
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(string(b[:n]), `"true"`) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("etcd %s not healthy within %v; log:\n%s", m.Name, healthBound, tail(m.logPath))
}

// Leader polls the members' status (the gRPC gateway's
// /v3/maintenance/status) until one of them says it leads, bounded.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	deadline := time.Now().Add(healthBound)
	for time.Now().Before(deadline) {
		for _, m := range c.Members {
			if m.cmd == nil {
				continue
			}
			resp, err := c.httpc.Post(m.ClientURL+"/v3/maintenance/status", "application/json", strings.NewReader("{}"))
			if err != nil {
				continue
			}
			var st struct {
				Header struct {
					MemberID string `json:"member_id"`
				} `json:"header"`
				Leader string `json:"leader"`
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.Leader != "" && st.Leader == st.Header.MemberID {
				return m
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no etcd member reported itself leader within %v", healthBound)
	return nil
}

// Kill stops a member with SIGKILL and waits for it (bounded).
func (c *Cluster) Kill(m *Member) {
	if m.cmd == nil {
		return
	}
	syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		c.t.Errorf("etcd %s (pid %d) did not exit after SIGKILL", m.Name, m.cmd.Process.Pid)
	}
	m.cmd = nil
}

// Restart starts a killed member again on the same ports and data.
func (c *Cluster) Restart(m *Member) {
	c.t.Helper()
	for i, a := range m.args {
		if a == "--initial-cluster-state" {
			m.args[i+1] = "existing"
		}
	}
	c.startMember(m)
	c.WaitHealthy(m)
}

// Stop kills every member (the test's cleanup).
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		c.Kill(m)
	}
}

// Context is a bounded context for one test step.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

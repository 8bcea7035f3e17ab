package daemon

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/config"
)

// A real daemon (Open, Serve, the conformance capsule testcap) answering
// raw HTTP on its socket and, optionally, loopback TCP: what one client
// can hold of it, and what a malformed request gets.

type liveDaemon struct {
	sock, tcp string
	stop      func()
}

func startLive(t *testing.T, mutate func(*config.Config)) *liveDaemon {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.SetStateDir(filepath.Join(dir, "state"))
	cfg.Socket = filepath.Join(dir, "d.sock")
	cfg.Processes.OnShutdown = config.OnShutdownStop // tests leave nothing running
	off := false
	cfg.Bundled = &off
	tc, err := filepath.Abs("../../../../capsules/testcap")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Capsules = []string{tc}
	// testcap asks for local, which is no longer enabled by default.
	cfg.Backends.Enabled = []string{"local"}
	cfg.ShutdownGrace = config.Duration(3 * time.Second)
	if mutate != nil {
		mutate(cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sock, err := ListenSocket(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	d := &liveDaemon{sock: cfg.Socket}
	var tcp net.Listener
	if cfg.TCP.Listen != "" {
		if tcp, err = net.Listen("tcp", cfg.TCP.Listen); err != nil {
			t.Fatal(err)
		}
		d.tcp = tcp.Addr().String()
	}
	rt, err := Open(ctx, cfg, Options{Log: slog.New(slog.DiscardHandler), Version: "test"})
	if err != nil {
		sock.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, rt, sock, tcp, cfg.ShutdownGrace.D()) }()
	d.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("the daemon did not stop within 60s")
		}
	}
	t.Cleanup(d.stop)
	return d
}

// dial opens a raw connection to the socket (or TCP when tcp is set).
func (d *liveDaemon) dial(t *testing.T, tcp bool) net.Conn {
	t.Helper()
	network, addr := "unix", d.sock
	if tcp {
		network, addr = "tcp", d.tcp
	}
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// answer is one HTTP answer read off a raw connection.
type answer struct {
	status int
	code   string
	msg    string
	body   string
}

// roundTrip writes a raw request and reads one answer, within 20s.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw string) answer {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return readAnswer(t, c, br)
}

func readAnswer(t *testing.T, c net.Conn, br *bufio.Reader) answer {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var er api.ErrorResponse
	_ = json.Unmarshal(b, &er)
	return answer{status: resp.StatusCode, code: er.Error.Code, msg: er.Error.Message, body: string(b)}
}

func post(path, body string, hdr ...string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s",
		path, strings.Join(hdr, ""), len(body), body)
}

func get(path string, hdr ...string) string {
	return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: d\r\n%s\r\n", path, strings.Join(hdr, ""))
}

// spawnTicker starts a persistent process printing a line every 100ms.
func (d *liveDaemon) spawnTicker(t *testing.T) string {
	t.Helper()
	c := d.dial(t, false)
	in := `{"capsule":"testcap","tool":"spawn_persistent","principal":"alice","input":{"request":{"cmd":"/bin/sh","args":["-c","while true; do echo tick; sleep 0.1; done"]}}}`
	a := roundTrip(t, c, bufio.NewReader(c), post("/v1/call", in))
	var res api.CallResponse
	var v struct{ OK string }
	if a.status != 200 || json.Unmarshal([]byte(a.body), &res) != nil || json.Unmarshal(res.Output, &v) != nil || v.OK == "" {
		t.Fatalf("spawn: %d %s", a.status, a.body)
	}
	return v.OK
}

// A client that sends its headers, then trickles (here: stops sending)
// its body, gets 408 and its connection closed once bodyTimeout passes:
// it cannot hold the connection, and a handler, forever.
func TestBodyReadTimeout(t *testing.T) {
	old := bodyTimeout
	bodyTimeout = 300 * time.Millisecond
	defer func() { bodyTimeout = old }()
	d := startLive(t, nil)
	for _, path := range []string{"/v1/call", "/v1/processes/x/stop", "/v1/health"} {
		c := d.dial(t, false)
		br := bufio.NewReader(c)
		a := roundTrip(t, c, br, "POST "+path+" HTTP/1.1\r\nHost: d\r\nContent-Length: 100\r\n\r\n{\"capsule\"")
		if a.status != http.StatusRequestTimeout {
			t.Fatalf("%s: trickled body answered %d %s; want 408", path, a.status, a.body)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: connection still open after a trickled body: %v", path, err)
		}
	}
}

// follow opens logs?follow=1 of id on a fresh connection (30 s read
// deadline) and returns the connection, to close (closing the body
// would read the endless stream to its end), and the stream's lines.
func (d *liveDaemon) follow(t *testing.T, id string) (net.Conn, *bufio.Scanner) {
	t.Helper()
	c := d.dial(t, false)
	if _, err := io.WriteString(c, get("/v1/processes/"+id+"/logs?follow=1")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("follow: %v %v", resp, err)
	}
	return c, bufio.NewScanner(resp.Body)
}

// The body deadline never cuts a streaming answer: `logs -f` keeps
// streaming long after bodyTimeout.
func TestFollowOutlivesBodyTimeout(t *testing.T) {
	old := bodyTimeout
	bodyTimeout = 200 * time.Millisecond
	defer func() { bodyTimeout = old }()
	d := startLive(t, nil)
	id := d.spawnTicker(t)
	c, sc := d.follow(t, id)
	start := time.Now()
	for time.Since(start) < 8*bodyTimeout {
		if !sc.Scan() {
			t.Fatalf("the follow stream ended after %v (body timeout %v): %v", time.Since(start), bodyTimeout, sc.Err())
		}
	}
	c.Close() // not resp.Body.Close: that would read the endless stream to its end
	sc2 := d.dial(t, false)
	if a := roundTrip(t, sc2, bufio.NewReader(sc2), post("/v1/processes/"+id+"/stop", `{"grace_ms":100}`)); a.status != 200 {
		t.Fatalf("stop: %d %s", a.status, a.body)
	}
}

// Malformed bodies are the caller's fault (400 invalid-request): invalid
// UTF-8 anywhere, trailing data after the JSON value, a grace_ms outside
// [0, 1h], a tool input that breaks the tool's schema.
func TestMalformedRequests(t *testing.T) {
	d := startLive(t, nil)
	id := d.spawnTicker(t)
	c := d.dial(t, false)
	br := bufio.NewReader(c)
	for _, tc := range []struct{ name, path, body, want string }{
		{"invalid UTF-8 in input", "/v1/call", "{\"capsule\":\"testcap\",\"tool\":\"echo\",\"input\":{\"s\":\"\xff\"}}", "UTF-8"},
		{"invalid UTF-8 in a name", "/v1/call", "{\"capsule\":\"test\xfecap\",\"tool\":\"echo\"}", "UTF-8"},
		{"trailing JSON", "/v1/call", `{"capsule":"testcap","tool":"echo"} {"capsule":"x"}`, "after the JSON value"},
		{"trailing garbage", "/v1/call", `{"capsule":"testcap","tool":"echo"}]`, "after the JSON value"},
		{"stop trailing", "/v1/processes/" + id + "/stop", `{"grace_ms":10}{}`, "after the JSON value"},
		{"grace overflow", "/v1/processes/" + id + "/stop", `{"grace_ms":9223372036854775807}`, "grace_ms 9223372036854775807 is out of range [0, 3600000]"},
		{"grace negative", "/v1/processes/" + id + "/stop", `{"grace_ms":-1}`, "grace_ms -1 is out of range [0, 3600000]"},
		{"input breaks the schema", "/v1/call", `{"capsule":"testcap","tool":"spawn","input":{"args":["x"]}}`, "required"},
		{"input type", "/v1/call", `{"capsule":"testcap","tool":"spawn","input":{"cmd":"/bin/true","timeout_ms":-5}}`, "/timeout_ms"},
	} {
		a := roundTrip(t, c, br, post(tc.path, tc.body))
		if a.status != http.StatusBadRequest || a.code != api.CodeInvalidRequest || !strings.Contains(a.msg, tc.want) {
			t.Errorf("%s: %d %s; want 400 invalid-request naming %q", tc.name, a.status, a.body, tc.want)
		}
	}
	// The process is still there: no malformed stop touched it.
	if a := roundTrip(t, c, br, get("/v1/processes/"+id)); a.status != 200 || !strings.Contains(a.body, `"running"`) {
		t.Fatalf("process after the refused stops: %d %s", a.status, a.body)
	}
	if a := roundTrip(t, c, br, post("/v1/processes/"+id+"/stop", `{"grace_ms":100}`)); a.status != 200 {
		t.Fatalf("stop: %d %s", a.status, a.body)
	}
}

// One client holds at most maxConnsPerClient connections: the next one is
// answered 429 too-many-connections (and closed); when one closes, a new
// one is served again. On the socket the client is the peer's uid; on TCP
// the principal of the token, so one principal's connections do not
// count against another's.
func TestConnectionCapPerClient(t *testing.T) {
	old := maxConnsPerClient
	maxConnsPerClient = 2
	defer func() { maxConnsPerClient = old }()
	tokA, tokB := "alice-token-0123456789", "bob-token-0123456789"
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	d := startLive(t, func(c *config.Config) {
		c.TCP.Listen = "127.0.0.1:0"
		c.Principals = map[string]config.Principal{"alice": {TokenSHA256: []string{hash(tokA)}}, "bob": {TokenSHA256: []string{hash(tokB)}}}
	})
	health := func(c net.Conn, tok string) answer {
		hdr := ""
		if tok != "" {
			hdr = "Authorization: Bearer " + tok + "\r\n"
		}
		return roundTrip(t, c, bufio.NewReader(c), get("/v1/health", hdr))
	}
	// Socket: two connections held, the third refused.
	held := []net.Conn{d.dial(t, false), d.dial(t, false)}
	for _, c := range held {
		if a := health(c, ""); a.status != 200 {
			t.Fatalf("held connection: %d %s", a.status, a.body)
		}
	}
	a := health(d.dial(t, false), "")
	if a.status != http.StatusTooManyRequests || a.code != api.CodeTooManyConnections || !strings.Contains(a.msg, "uid") {
		t.Fatalf("third connection: %d %s; want 429 too-many-connections naming the uid", a.status, a.body)
	}
	held[0].Close()
	deadline := time.Now().Add(20 * time.Second)
	for a := health(d.dial(t, false), ""); a.status != 200; a = health(d.dial(t, false), "") {
		if time.Now().After(deadline) {
			t.Fatalf("a slot was never freed after a connection closed: %d %s", a.status, a.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// TCP: alice holds two; her third is refused, bob is served.
	for i := 0; i < 2; i++ {
		if a := health(d.dial(t, true), tokA); a.status != 200 {
			t.Fatalf("alice %d: %d %s", i, a.status, a.body)
		}
	}
	if a := health(d.dial(t, true), tokA); a.status != http.StatusTooManyRequests || !strings.Contains(a.msg, "alice") {
		t.Fatalf("alice's third: %d %s; want 429 naming her", a.status, a.body)
	}
	if a := health(d.dial(t, true), tokB); a.status != 200 {
		t.Fatalf("bob while alice is at her cap: %d %s", a.status, a.body)
	}
}

// The config's guest memory and log-rate defaults are the host's.
func TestGuestMemoryDefaultsAgree(t *testing.T) {
	if config.DefaultGuestMemoryBytes != host.DefaultGuestMemoryBytes || config.DefaultCapsuleGuestMemoryBytes != host.DefaultCapsuleGuestMemoryBytes {
		t.Fatalf("config %d/%d, host %d/%d", config.DefaultGuestMemoryBytes, config.DefaultCapsuleGuestMemoryBytes,
			host.DefaultGuestMemoryBytes, host.DefaultCapsuleGuestMemoryBytes)
	}
	if config.DefaultGuestLogLinesPerSec != host.DefaultGuestLogLinesPerSec || config.DefaultGuestLogBurst != host.DefaultGuestLogBurst {
		t.Fatalf("log rate: config %d/%d, host %d/%d", config.DefaultGuestLogLinesPerSec, config.DefaultGuestLogBurst,
			host.DefaultGuestLogLinesPerSec, host.DefaultGuestLogBurst)
	}
}

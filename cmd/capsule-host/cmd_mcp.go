//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"golang.org/x/sys/unix"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/mcp"
	"github.com/capsule-host/capsule-host/host/config"
)

func init() {
	commands = append(commands, &command{
		name: "mcp", args: "--principal P", summary: "serve the daemon's tools and processes to an MCP client on stdin/stdout",
		help: `An MCP (Model Context Protocol) server on stdio, for clients that spawn
their servers (Claude Code, Codex, editors). It talks to the running daemon
over its socket (or --tcp), so persistent processes live in the daemon and
outlive the MCP client: a new session lists them again.

Tools: every capsule tool as CAPSULE__TOOL with its declared input schema,
plus list_processes, read_process_output, process_status and stop_process
for this principal's processes. Resources: capsule-host://process/ID/status,
.../stdout and .../stderr per process; subscribe to one to get
notifications/resources/updated on new output and on exit.

The principal is --principal, else $CAPSULE_HOST_PRINCIPAL, else the
config's [mcp] principal; over --tcp the token's principal (from
$CAPSULE_HOST_TOKEN). There is no default: the owner-fallback principal
cannot hold persistent processes.

On the socket, when stdin and stdout are pipes or sockets (as MCP clients
give them), this process hands them to the daemon, which serves the
session itself, and waits: the session costs what API calls cost. If the
daemon restarts, the same session goes on with the next one. Over --tcp,
or on a terminal, it serves the session here and makes API calls.

With no daemon running it exits 3 and says how to start one. It never runs
a host in-process: processes started by an in-process host would die with
the MCP client, which is what this command exists to avoid. Run
'capsule-host serve' (for instance as a user service) instead.

Client config example (stdio):
  {"mcpServers": {"capsule-host": {"command": "capsule-host",
    "args": ["mcp", "--principal", "alice"]}}}`,
		maxArgs: 0,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.StringVar(&o.principal, "principal", "", "`principal` the session acts for (default $CAPSULE_HOST_PRINCIPAL, then the config's [mcp] principal)")
		},
		run: runMCP,
	})
}

func runMCP(e *env, o *opts, _ []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	h, err := c.Health(e.ctx)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(e)
	if err != nil {
		return err
	}
	principal, err := mcpPrincipal(o, h, cfg)
	if err != nil {
		return err
	}
	// The log goes to stderr (stdout is the protocol); warnings only,
	// unless --log-level asks for more.
	if e.g.logLevel == "" {
		cfg.Log.Level = "warn"
	}
	lg, err := newLogger(e.stderr, e.g, cfg)
	if err != nil {
		return err
	}
	if e.g.tcp != "" {
		return relayMCP(e, lg, c, principal)
	}
	sock, err := socketPath(e)
	if err != nil {
		return err
	}
	in, iok := e.stdin.(*os.File)
	out, ook := e.stdout.(*os.File)
	if iok && ook && api.Handable(in) && api.Handable(out) {
		err := handOffMCP(e, lg, sock, principal, in, out)
		if !errors.Is(err, errNoHandOff) {
			return err
		}
		lg.Info("relaying instead", "err", err)
	}
	// One request per tool call for the whole session: keep the
	// connections (NewTCP already does).
	return relayMCP(e, lg, api.NewUnixKeepAlive(sock), principal)
}

// errNoHandOff: the daemon did not take the stdio (one built before the
// hand-off); the session is relayed instead.
var errNoHandOff = errors.New("the daemon does not take stdio hand-offs")

// Bounds of the wait for the next daemon, after the one serving a
// handed-off session went away.
const (
	handOffRetryMin = 100 * time.Millisecond
	handOffRetryMax = 2 * time.Second
)

// handOffMCP gives the daemon this process's stdin and stdout: the
// session runs in the daemon, over the client's own pipes, and this
// process waits. It returns when the session ended (the client closed
// stdin), when told to stop (SIGINT, SIGTERM: closing the connection ends
// the session), or with errNoHandOff. When the daemon goes away instead
// (a restart), it hands the same stdio to the next daemon with the
// session's last state, so the client's session goes on; its requests
// meanwhile wait in the pipe.
func handOffMCP(e *env, lg *slog.Logger, sock, principal string, in, out *os.File) error {
	var state json.RawMessage
	wait := handOffRetryMin
	for first := true; ; first = false {
		hs, err := api.HandOffStdio(e.ctx, sock, principal, in, out, state)
		var ae *api.Error
		switch {
		case err == nil:
		case e.ctx.Err() != nil:
			return nil
		case first && errors.As(err, &ae) && ae.Status != http.StatusServiceUnavailable:
			return fmt.Errorf("%w: %w", errNoHandOff, err)
		case first:
			return err
		default:
			if clientLeft(in, wait) {
				return nil
			}
			wait = min(2*wait, handOffRetryMax)
			continue
		}
		wait = handOffRetryMin
		lg.Info("MCP session handed to the daemon", "daemon", sock, "principal", principal, "resumed", !first)
		end, err := followHandOff(e.ctx, hs, &state)
		if end != "" || e.ctx.Err() != nil {
			return nil
		}
		lg.Warn("the daemon went away; the session goes on with the next one", "err", err)
	}
}

// followHandOff reads the daemon's control lines, keeping the last state,
// until the session's end (returned) or the connection's.
func followHandOff(ctx context.Context, hs *api.StdioSession, state *json.RawMessage) (string, error) {
	stop := context.AfterFunc(ctx, func() { _ = hs.Close() })
	defer stop()
	defer hs.Close()
	for {
		c, err := hs.Next()
		if err != nil {
			return "", err
		}
		if c.State != nil {
			*state = c.State
		}
		if c.End != "" {
			return c.End, nil
		}
	}
}

// clientLeft waits up to d for the MCP client to close its end of stdin
// (the pipe's or socket's hang-up): no reason to wait for a daemon then.
func clientLeft(in *os.File, d time.Duration) bool {
	rc, err := in.SyscallConn()
	if err != nil {
		return true
	}
	left := false
	_ = rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(p, int(d.Milliseconds()))
		left = err == nil && n > 0 && p[0].Revents&(unix.POLLHUP|unix.POLLRDHUP|unix.POLLERR|unix.POLLNVAL) != 0
	})
	return left
}

// relayMCP serves the session in this process, making an API call of
// each request: over --tcp (descriptors cannot cross it), or when stdin
// or stdout is not a pipe or socket (a terminal: the user's, not the
// daemon's), or for a daemon that takes no hand-off.
func relayMCP(e *env, lg *slog.Logger, c *api.Client, principal string) error {
	srv, err := mcp.New(c, mcp.Options{Principal: principal, Version: binVersion(), Log: lg})
	if err != nil {
		return err
	}
	if err := srv.SyncTools(e.ctx); err != nil {
		return err
	}
	hc, endpoint, err := daemonMCPEndpoint(e, principal)
	if err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(e.ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); srv.WatchToolChanges(wctx, hc, endpoint) }()
	defer func() { stopWatch(); <-watched }()
	lg.Info("capsule-host mcp relaying on stdio", "daemon", c.Where(), "principal", principal)
	err = srv.Run(e.ctx, mcp.StdioTransport(e.stdin, e.stdout))
	if e.ctx.Err() != nil || errors.Is(err, io.EOF) {
		// SIGINT/SIGTERM or the client closed stdin: a normal end.
		return nil
	}
	return err
}

// daemonMCPEndpoint is how this process reaches the daemon's own MCP
// endpoint (over the same socket or TCP address as its API calls), where
// it watches for reloads to tell its client notifications/tools/list_changed.
func daemonMCPEndpoint(e *env, principal string) (*http.Client, string, error) {
	if e.g.tcp != "" {
		tr := bearer{tok: os.Getenv("CAPSULE_HOST_TOKEN"), next: &http.Transport{DisableCompression: true}}
		return &http.Client{Transport: tr}, "http://" + e.g.tcp + "/mcp", nil
	}
	sock, err := socketPath(e)
	if err != nil {
		return nil, "", err
	}
	var d net.Dialer
	tr := &http.Transport{DisableCompression: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", sock)
	}}
	return &http.Client{Transport: tr}, "http://capsule-host/mcp?principal=" + url.QueryEscape(principal), nil
}

// bearer adds the token to each request of the reload-watch session.
type bearer struct {
	tok  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.next.RoundTrip(r)
}

// mcpPrincipal picks the session's principal: --principal, else
// $CAPSULE_HOST_PRINCIPAL, else the config's mcp.principal; over TCP the
// token decides, and a different name is refused here rather than on
// every call. None is an error: never the owner-fallback.
func mcpPrincipal(o *opts, h api.Health, cfg *config.Config) (string, error) {
	p := o.principal
	if p == "" {
		p = os.Getenv("CAPSULE_HOST_PRINCIPAL")
	}
	if p == "" {
		p = cfg.MCP.Principal
	}
	if h.Principal != "" {
		if p != "" && p != h.Principal {
			return "", usagef("the token is for principal %q; it cannot act as %q", h.Principal, p)
		}
		return h.Principal, nil
	}
	if p == "" {
		return "", usagef("%v: pass --principal NAME (or set $CAPSULE_HOST_PRINCIPAL, or [mcp] principal in the config); persistent processes belong to a named principal, never to the owner-fallback", mcp.ErrNoPrincipal)
	}
	return p, nil
}

//go:build !leanclient

package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/mcp"
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

The principal is --principal, else $CAPSULE_HOST_PRINCIPAL; over --tcp the
token's principal (from $CAPSULE_HOST_TOKEN). There is no default: the
owner-fallback principal cannot hold persistent processes.

With no daemon running it exits 3 and says how to start one. It never runs
a host in-process: processes started by an in-process host would die with
the MCP client, which is what this command exists to avoid. Run
'capsule-host serve' (for instance as a user service) instead.

Client config example (stdio):
  {"mcpServers": {"capsule-host": {"command": "capsule-host",
    "args": ["mcp", "--principal", "alice"]}}}`,
		maxArgs: 0,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.StringVar(&o.principal, "principal", "", "`principal` the session acts for (default $CAPSULE_HOST_PRINCIPAL)")
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
	principal, err := mcpPrincipal(o, h)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(e)
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
	lg.Info("capsule-host mcp serving on stdio", "daemon", c.Where(), "principal", principal)
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
// $CAPSULE_HOST_PRINCIPAL; over TCP the token decides, and a different
// name is refused here rather than on every call.
func mcpPrincipal(o *opts, h api.Health) (string, error) {
	p := o.principal
	if p == "" {
		p = os.Getenv("CAPSULE_HOST_PRINCIPAL")
	}
	if h.Principal != "" {
		if p != "" && p != h.Principal {
			return "", usagef("the token is for principal %q; it cannot act as %q", h.Principal, p)
		}
		return h.Principal, nil
	}
	if p == "" {
		return "", usagef("%v: pass --principal NAME (or set $CAPSULE_HOST_PRINCIPAL); persistent processes belong to a named principal, never to the owner-fallback", mcp.ErrNoPrincipal)
	}
	return p, nil
}

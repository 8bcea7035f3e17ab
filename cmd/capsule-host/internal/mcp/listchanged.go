package mcp

import (
	"context"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Reload watching over the daemon's own MCP endpoint (RFC §19, "List
// changes"). A stdio server is a separate process: the daemon's reload
// (reload, SIGHUP, serve --watch) reaches it only if it listens. The daemon
// already tells its streamable-HTTP sessions with
// notifications/tools/list_changed, so the stdio server holds one such
// session as a client and re-syncs its tools when told. No new API, no
// polling of the capsule list.
const (
	// watchKeepAlive pings the daemon's session: a daemon that went away
	// ends it, so the watcher reconnects (and the ping keeps the session
	// from its idle timeout).
	watchKeepAlive = 30 * time.Second
	// watchRetryMax bounds the wait between reconnection attempts while
	// the daemon is down.
	watchRetryMax = 5 * time.Second
)

// WatchToolChanges keeps a client session to the daemon's MCP endpoint
// (endpoint, reached with hc) and re-syncs s's tools whenever the daemon
// says its tools changed, and after every (re)connection, where a reload
// may have been missed. A change makes the SDK send
// notifications/tools/list_changed to s's own client. It returns when ctx
// ends.
func (s *Server) WatchToolChanges(ctx context.Context, hc *http.Client, endpoint string) {
	resync := func(ctx context.Context) {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := s.SyncTools(sctx); err != nil && ctx.Err() == nil {
			s.log.Warn("MCP: re-syncing the tools after the daemon's list_changed", "err", err)
		}
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "capsule-host-mcp-reload-watch", Version: s.o.Version}, &mcp.ClientOptions{
		Logger:                 s.log,
		KeepAlive:              watchKeepAlive,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { go resync(ctx) },
	})
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
		if err == nil {
			wait = 100 * time.Millisecond
			resync(ctx)
			stop := context.AfterFunc(ctx, func() { _ = cs.Close() })
			_ = cs.Wait()
			stop()
			s.log.Debug("MCP: the daemon's reload-watch session ended; reconnecting")
		} else if ctx.Err() == nil {
			s.log.Debug("MCP: cannot reach the daemon's MCP endpoint to watch reloads", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, watchRetryMax)
	}
}

// Package mcp is capsule-host's Model Context Protocol front end: every
// capsule tool as an MCP tool, the caller's persistent processes as tools
// and as resources with subscriptions. It speaks to a Daemon (the API
// client over the unix socket or loopback TCP, or the daemon's own runtime
// for its streamable-HTTP endpoint), never to the host directly, so the
// processes live in the daemon and outlive the MCP client.
//
// The protocol is the official Go SDK's (github.com/modelcontextprotocol/
// go-sdk); this package only maps names, schemas, results and errors.
//
// Names (MCP tool names are [A-Za-z0-9_.-]{1,128}; many clients accept
// only [A-Za-z0-9_-]):
//
//	CAPSULE__TOOL    a capsule tool (capsule names never hold "_", so the
//	                 first "__" splits the name unambiguously)
//	list_processes, read_process_output, process_status, stop_process
//	                 the process tools (no "__": they cannot collide)
//
// Resources, one set per persistent process of the principal:
//
//	capsule-host://process/ID/status   JSON (api.Process)
//	capsule-host://process/ID/stdout   output; ?cursor=C&max=N reads on
//	capsule-host://process/ID/stderr   from a cursor (_meta carries next)
package mcp

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
)

// Daemon is what the MCP front end needs of the daemon: the API client's
// methods. *api.Client implements it.
type Daemon interface {
	Capsules(ctx context.Context) ([]api.Capsule, error)
	Call(ctx context.Context, req api.CallRequest) (api.CallResponse, error)
	Processes(ctx context.Context, capsule, principal string) ([]api.Process, error)
	Process(ctx context.Context, id string) (api.Process, error)
	Logs(ctx context.Context, id string, q api.LogQuery) (api.LogChunk, error)
	Follow(ctx context.Context, id string, q api.LogQuery, fn func(api.LogChunk) error) error
	Stop(ctx context.Context, id string, grace *time.Duration) (api.Exit, error)
}

// ErrNoPrincipal: an MCP server must act for a named principal; the
// owner-fallback cannot hold persistent processes, which is the point of
// going through the daemon.
var ErrNoPrincipal = errors.New("the MCP server needs a principal")

// Options configure one MCP server.
type Options struct {
	// Principal every call acts for and whose processes are visible.
	Principal string
	// Version is reported to clients as the server's version.
	Version string
	Log     *slog.Logger
	// MaxSubscriptions bounds one session's resource subscriptions
	// (0: DefaultMaxSubscriptions).
	MaxSubscriptions int
	// SessionID, if set, names each new session (the streamable-HTTP
	// endpoint binds the ID to the principal); SessionEnded is told when
	// an initialized session ends.
	SessionID    func() string
	SessionEnded func(id string)
	// OnState, if set, is told a session's state (the initialize
	// handshake, the log level) once it is initialized and at each change:
	// a handed-off stdio session (Serve) reports it to the process that
	// handed it, which resumes the session with it on the next daemon.
	OnState func(sess *mcp.ServerSession, st mcp.ServerSessionState)
}

// DefaultMaxSubscriptions bounds the watchers one session may hold. Over
// the API client each costs a follow stream, that is a connection to the
// daemon, where one uid holds at most 64 on the socket: the bound leaves
// room for calls and for other clients.
const DefaultMaxSubscriptions = 16

// Server is one principal's MCP server over a Daemon.
type Server struct {
	d    Daemon
	o    Options
	log  *slog.Logger
	srv  *mcp.Server
	subs *subscriptions

	mu    sync.Mutex
	tools map[string]toolRef // MCP name -> capsule tool, as last synced
	// states are the sessions' states as OnState reports them.
	states map[*mcp.ServerSession]*mcp.ServerSessionState
}

// New returns the MCP server for o.Principal over d. Call SyncTools before
// serving so the first tools/list is complete.
func New(d Daemon, o Options) (*Server, error) {
	if o.Principal == "" {
		return nil, ErrNoPrincipal
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxSubscriptions <= 0 {
		o.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	s := &Server{d: d, o: o, log: o.Log, tools: map[string]toolRef{}, states: map[*mcp.ServerSession]*mcp.ServerSessionState{}}
	s.subs = newSubscriptions(s)
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "capsule-host", Version: o.Version}, &mcp.ServerOptions{
		Instructions: "Tools of the capsules loaded in the capsule-host daemon (CAPSULE__TOOL), and this principal's persistent processes as tools and resources (capsule-host://process/ID/{status,stdout,stderr}); subscribe to a resource to be told of new output and of the exit.",
		Logger:       o.Log,
		Capabilities: &mcp.ServerCapabilities{
			Tools:     &mcp.ToolCapabilities{ListChanged: true},
			Resources: &mcp.ResourceCapabilities{Subscribe: true, ListChanged: true},
		},
		SubscribeHandler:   s.subs.subscribe,
		UnsubscribeHandler: s.subs.unsubscribe,
		GetSessionID:       o.SessionID,
		InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			if o.SessionEnded != nil && req.Session != nil {
				go func() { _ = req.Session.Wait(); o.SessionEnded(req.Session.ID()) }()
			}
		},
	})
	s.addProcessTools()
	s.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "process", URITemplate: uriScheme + "process/{id}/{stream}",
		Description: "A persistent process of this principal: stream is status (JSON), stdout or stderr (add ?cursor=C to read on).",
	}, s.readResource)
	s.srv.AddReceivingMiddleware(s.middleware)
	s.srv.AddSendingMiddleware(s.sendingMiddleware)
	return s, nil
}

// MCP returns the SDK server (for a transport or an HTTP handler).
func (s *Server) MCP() *mcp.Server { return s.srv }

// Run serves one session on t until the client leaves or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	defer s.subs.closeAll()
	return s.srv.Run(ctx, t)
}

// Serve serves one session on t until the client leaves or ctx ends, as
// Run does; with state, the session starts initialized in that state (a
// stdio session resumed on this daemon after the last one went away), and
// its client is told that the tool list changed, since this daemon may
// serve other capsules.
func (s *Server) Serve(ctx context.Context, t mcp.Transport, state *mcp.ServerSessionState) error {
	defer s.subs.closeAll()
	ss, err := s.srv.Connect(ctx, t, &mcp.ServerSessionOptions{State: state})
	if err != nil {
		return err
	}
	if state != nil {
		s.remember(ss, func(st *mcp.ServerSessionState) { *st = *state })
		// Adding a tool again makes the SDK send tools/list_changed.
		s.addProcessTools()
	}
	stop := context.AfterFunc(ctx, func() { _ = ss.Close() })
	defer stop()
	err = ss.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// remember applies change to sess's recorded state and tells OnState once
// the session is initialized.
func (s *Server) remember(sess *mcp.ServerSession, change func(*mcp.ServerSessionState)) {
	if s.o.OnState == nil || sess == nil {
		return
	}
	s.mu.Lock()
	st := s.states[sess]
	if st == nil {
		st = &mcp.ServerSessionState{}
		s.states[sess] = st
		go func() { _ = sess.Wait(); s.mu.Lock(); delete(s.states, sess); s.mu.Unlock() }()
	}
	change(st)
	snap := *st
	s.mu.Unlock()
	if snap.InitializedParams != nil {
		s.o.OnState(sess, snap)
	}
}

// recordState follows the requests that change a session's state (see
// Options.OnState).
func (s *Server) recordState(method string, req mcp.Request, res mcp.Result) {
	sess, _ := req.GetSession().(*mcp.ServerSession)
	switch p := req.GetParams().(type) {
	case *mcp.InitializeParams:
		if r, ok := res.(*mcp.InitializeResult); ok && method == "initialize" {
			s.remember(sess, func(st *mcp.ServerSessionState) {
				st.InitializeParams, st.NegotiatedProtocolVersion = p, r.ProtocolVersion
			})
		}
	case *mcp.InitializedParams:
		if p == nil {
			p = &mcp.InitializedParams{} // as the SDK records it: non-nil means initialized
		}
		s.remember(sess, func(st *mcp.ServerSessionState) { st.InitializedParams = p })
	case *mcp.SetLoggingLevelParams:
		s.remember(sess, func(st *mcp.ServerSessionState) { st.LogLevel = p.Level })
	}
}

// Close ends every session of the server and its subscriptions (the
// daemon's shutdown: SSE streams must not hold it up).
func (s *Server) Close() {
	for ss := range s.srv.Sessions() {
		_ = ss.Close()
	}
	s.subs.closeAll()
}

// middleware answers resources/list from the daemon at each request (so
// a client that lost its context lists its processes again, and nothing
// is cached that could go stale), answers resources/read, confirms a
// resources/subscribe to its watcher once the SDK recorded it, and
// refreshes the tool list before tools/list (so a capsule loaded or
// removed since shows up, with notifications/tools/list_changed to the
// sessions).
func (s *Server) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "resources/list":
			return s.listResources(ctx)
		case "resources/read":
			// Here rather than through the template: the SDK's template
			// match refuses a URI with a query (?cursor=).
			if r, ok := req.(*mcp.ReadResourceRequest); ok && r.Params != nil {
				return s.readResource(ctx, r)
			}
		case "resources/subscribe":
			res, err := next(ctx, method, req)
			if r, ok := req.(*mcp.SubscribeRequest); ok && err == nil && r.Params != nil {
				s.subs.confirmed(r.Session, r.Params.URI)
			}
			return res, err
		case "tools/list":
			if err := s.SyncTools(ctx); err != nil {
				s.log.Warn("refreshing the tool list", "err", err)
			}
		case "initialize", "notifications/initialized", "logging/setLevel":
			res, err := next(ctx, method, req)
			if err == nil && s.o.OnState != nil {
				s.recordState(method, req, res)
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

// sendingMiddleware sees the acknowledgement of a subscriptions/listen
// stream, which the SDK sends once it recorded the stream's resource
// subscriptions: from then on their notifications reach the session.
func (s *Server) sendingMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/subscriptions/acknowledged" {
			p, _ := req.GetParams().(*mcp.SubscriptionsAcknowledgedParams)
			sess, _ := req.GetSession().(*mcp.ServerSession)
			if p != nil && sess != nil {
				s.subs.confirmed(sess, p.Notifications.ResourceSubscriptions...)
			}
		}
		return next(ctx, method, req)
	}
}

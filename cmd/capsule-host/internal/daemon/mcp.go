package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/mcp"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/registry"
)

// MCPPath is the streamable-HTTP MCP endpoint, on the socket and on the
// loopback TCP listener.
const MCPPath = "/mcp"

// mcpSessionIdle closes an MCP session that sent no request for this
// long (its subscriptions with it); a client that comes back starts a new
// session and lists its processes again.
const mcpSessionIdle = 30 * time.Minute

// mcpEventBytes bounds the SSE events kept for resumption, all sessions
// together (the oldest go first).
const mcpEventBytes = 8 << 20

// mcpEndpoint is the daemon's MCP endpoint: one mcp.Server per session,
// for the principal of the request that opened it. On TCP the bearer
// token is the principal; on the socket (the operator) the client names
// it with ?principal= or the Capsule-Principal header. A session ID is
// bound to its principal: another principal presenting it gets the
// answer of an unknown session.
type mcpEndpoint struct {
	s *Server
	h *sdk.StreamableHTTPHandler

	mu       sync.Mutex
	sessions map[string]string // session ID -> principal
	servers  map[*mcp.Server]bool
}

// slotKey carries, through one HTTP request, the server made for it (the
// SDK asks for it more than once per request).
type slotKey struct{}

type slot struct {
	principal string
	srv       *mcp.Server
}

func (s *Server) mcpHandler() http.Handler {
	e := &mcpEndpoint{s: s, sessions: map[string]string{}, servers: map[*mcp.Server]bool{}}
	// The event store makes SSE streams resumable (Last-Event-ID); it
	// keeps the newest mcpEventBytes of all sessions.
	store := sdk.NewMemoryEventStore(nil)
	store.SetMaxBytes(mcpEventBytes)
	e.h = sdk.NewStreamableHTTPHandler(e.server, &sdk.StreamableHTTPOptions{
		Logger: s.log, SessionTimeout: mcpSessionIdle, MaxRequestBodyBytes: maxBody, EventStore: store,
	})
	go func() {
		<-s.stopping
		e.closeAll()
	}()
	s.rt.OnReload(e.syncAll)
	return e
}

// syncAll re-syncs every session's tools after a reload: a change makes
// the SDK send notifications/tools/list_changed at once, not at the
// client's next tools/list or call.
func (e *mcpEndpoint) syncAll() {
	e.mu.Lock()
	srvs := make([]*mcp.Server, 0, len(e.servers))
	for srv := range e.servers {
		srvs = append(srvs, srv)
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range srvs {
		if err := srv.SyncTools(ctx); err != nil {
			e.s.log.Warn("MCP: re-syncing a session's tools after a reload", "err", err)
		}
	}
}

func (e *mcpEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := e.principal(w, r)
	if !ok {
		return
	}
	if r.Method == http.MethodPost && strings.EqualFold(r.Header.Get("Upgrade"), api.StdioUpgrade) {
		e.stdio(w, r, p) // mcpstdio.go
		return
	}
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		e.mu.Lock()
		owner, known := e.sessions[id]
		e.mu.Unlock()
		if known && owner != p {
			// The same answer as for a session that never was.
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
	} else if e.s.isDraining() {
		writeErr(w, http.StatusServiceUnavailable, api.CodeShuttingDown, "the daemon is shutting down")
		return
	}
	e.h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), slotKey{}, &slot{principal: p})))
}

// principal is who the request acts for, or false after writing the
// refusal.
func (e *mcpEndpoint) principal(w http.ResponseWriter, r *http.Request) (string, bool) {
	named := r.URL.Query().Get("principal")
	if named == "" {
		named = r.Header.Get("Capsule-Principal")
	}
	if wh := whoFrom(r); wh.tcp {
		if named != "" && named != wh.principal {
			writeErr(w, http.StatusForbidden, api.CodeForbidden, fmt.Sprintf("your token is for principal %q; it cannot act as %q", wh.principal, named))
			return "", false
		}
		return wh.principal, true
	}
	if named == "" {
		writeErr(w, http.StatusUnauthorized, api.CodeUnauthorized, "name the principal on the socket: "+MCPPath+"?principal=NAME (or the Capsule-Principal header); the owner-fallback cannot hold persistent processes")
		return "", false
	}
	return named, true
}

// server is the SDK's getServer: the request's server, made once per
// request that opens a session; nil for requests of an existing session
// (the SDK then finds the session's own).
func (e *mcpEndpoint) server(r *http.Request) *sdk.Server {
	sl, _ := r.Context().Value(slotKey{}).(*slot)
	if sl == nil || r.Header.Get("Mcp-Session-Id") != "" {
		return nil
	}
	if sl.srv != nil {
		return sl.srv.MCP()
	}
	var srv *mcp.Server
	srv, err := mcp.New(localDaemon{e.s}, mcp.Options{
		Principal: sl.principal, Version: e.s.rt.Version, Log: e.s.log,
		SessionID: func() string { return e.newSession(sl.principal) },
		SessionEnded: func(id string) {
			e.mu.Lock()
			delete(e.sessions, id)
			delete(e.servers, srv)
			e.mu.Unlock()
		},
	})
	if err != nil {
		e.s.log.Warn("MCP session refused", "err", err)
		return nil
	}
	if err := srv.SyncTools(r.Context()); err != nil {
		e.s.log.Warn("MCP session without tools", "err", err)
	}
	e.mu.Lock()
	e.servers[srv] = true
	e.mu.Unlock()
	sl.srv = srv
	return srv.MCP()
}

func (e *mcpEndpoint) newSession(principal string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	e.mu.Lock()
	e.sessions[id] = principal
	e.mu.Unlock()
	return id
}

// closeAll ends every session at shutdown, so no SSE stream holds the
// daemon's graceful stop for its whole grace.
func (e *mcpEndpoint) closeAll() {
	e.mu.Lock()
	srvs := make([]*mcp.Server, 0, len(e.servers))
	for srv := range e.servers {
		srvs = append(srvs, srv)
	}
	e.mu.Unlock()
	for _, srv := range srvs {
		srv.Close()
	}
}

// localDaemon is mcp.Daemon over this daemon's own runtime: the same
// operations, errors and codes as the HTTP API, without a round trip.
type localDaemon struct{ s *Server }

func (l localDaemon) Capsules(context.Context) ([]api.Capsule, error) {
	return l.s.rt.CapsuleViews(), nil
}

func (l localDaemon) Call(ctx context.Context, req api.CallRequest) (api.CallResponse, error) {
	if l.s.isDraining() {
		return api.CallResponse{}, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeShuttingDown, Message: "the daemon is shutting down"}
	}
	if req.Principal != "" {
		ctx = host.WithPrincipal(ctx, req.Principal)
	}
	start := time.Now()
	res, err := l.s.rt.Host.Call(ctx, req.Capsule, req.Tool, string(req.Input))
	d := time.Since(start)
	if err != nil {
		ae := callError(err)
		l.s.log.Info("call failed", "via", "mcp", "capsule", req.Capsule, "tool", req.Tool, "principal", req.Principal, "code", ae.Code, "tool_code", ae.ToolCode, "err", err)
		return api.CallResponse{}, ae
	}
	out := json.RawMessage(res.Output)
	if !json.Valid(out) {
		out, _ = json.Marshal(res.Output)
	}
	return api.CallResponse{Output: out, Instance: res.Instance, DurationMS: d.Milliseconds()}, nil
}

func (l localDaemon) Processes(_ context.Context, capsule, principal string) ([]api.Process, error) {
	infos := l.s.rt.Registry.OperatorList(registry.OperatorFilter{Capsule: capsule, Principal: principal})
	out := make([]api.Process, 0, len(infos))
	for _, in := range infos {
		out = append(out, l.s.rt.ProcessView(in))
	}
	return out, nil
}

func (l localDaemon) Process(_ context.Context, id string) (api.Process, error) {
	info, err := l.s.rt.Registry.OperatorStatus(id)
	if err != nil {
		return api.Process{}, regAPIErr(err)
	}
	return l.s.rt.ProcessView(info), nil
}

func (l localDaemon) Logs(_ context.Context, id string, q api.LogQuery) (api.LogChunk, error) {
	stream := registry.Stdout
	if q.Stream == "stderr" {
		stream = registry.Stderr
	}
	max := defaultReadMax
	if q.Max > 0 {
		max = min(q.Max, 16<<20)
	}
	var cursor *string
	if q.Cursor != "" {
		cursor = &q.Cursor
	}
	ch, err := l.s.rt.Registry.OperatorReadSince(id, stream, cursor, uint32(max))
	if err != nil {
		return api.LogChunk{}, regAPIErr(err)
	}
	return apiChunk(ch), nil
}

// Follow hands fn each new chunk of a stream until its EOF. Between reads
// it waits for the process's next write or its exit (logWake).
func (l localDaemon) Follow(ctx context.Context, id string, q api.LogQuery, fn func(api.LogChunk) error) error {
	info, err := l.s.rt.Registry.OperatorStatus(id)
	if err != nil {
		return regAPIErr(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	wake := newLogWake(ctx, l.s.rt.Registry, info.ID)
	for {
		wake.arm() // before the read: a write after it ends the wait
		ch, err := l.Logs(ctx, id, q)
		if err != nil {
			return err
		}
		if len(ch.Data) > 0 || ch.BytesDropped > 0 || ch.EOF {
			if err := fn(ch); err != nil || ch.EOF {
				return err
			}
		}
		if ch.Next != "" {
			q.Cursor = ch.Next
		}
		if len(ch.Data) > 0 {
			continue
		}
		wake.wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (l localDaemon) Stop(ctx context.Context, id string, grace *time.Duration) (api.Exit, error) {
	// As on the API: once asked, a stop runs to its end.
	ex, err := l.s.rt.Registry.OperatorStop(context.WithoutCancel(ctx), id, grace)
	if err != nil {
		return api.Exit{}, regAPIErr(err)
	}
	return l.s.rt.stoppedExit(id, ex), nil
}

// regAPIErr is a registry error as the API client would have returned it.
func regAPIErr(err error) error {
	code, status := regCode(err)
	msg := err.Error()
	if code == api.CodeNoSuchProcess {
		msg = "no such process"
	}
	return &api.Error{Status: status, Code: code, Message: msg}
}

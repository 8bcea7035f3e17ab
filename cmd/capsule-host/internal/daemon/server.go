package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/wit"
)

// maxBody bounds a request body (a tool input); larger is refused.
const maxBody = 8 << 20

// followPoll is how often a follow stream looks for new output when the
// registry's events cannot wake it (logWake), and followKeepalive how often
// it sends an empty chunk when there is none (so a dead client is noticed
// and a live one sees progress).
const (
	followPoll      = 100 * time.Millisecond
	followKeepalive = 5 * time.Second
	defaultReadMax  = 64 << 10
)

// Server answers the HTTP/JSON API over a Runtime.
type Server struct {
	rt  *Runtime
	log *slog.Logger

	// tokens maps the SHA-256 of a bearer token to its principal (TCP only).
	tokens map[[32]byte]string

	mu       sync.Mutex
	draining bool
	// stopping is closed when shutdown starts: follow streams end.
	stopping chan struct{}
}

// NewServer returns the API over rt.
func NewServer(rt *Runtime) *Server {
	s := &Server{rt: rt, log: rt.Log, tokens: map[[32]byte]string{}, stopping: make(chan struct{})}
	for name, p := range rt.Config.Principals {
		for _, h := range p.TokenSHA256 {
			var k [32]byte
			if b, err := hex.DecodeString(h); err == nil && len(b) == 32 {
				copy(k[:], b)
				s.tokens[k] = name
			}
		}
	}
	return s
}

// beginDrain marks the server as shutting down: new calls get
// shutting-down, follow streams end.
func (s *Server) beginDrain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.draining {
		s.draining = true
		close(s.stopping)
	}
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// who is the authenticated caller of a request.
type who struct {
	tcp       bool   // came over TCP: scoped to principal
	principal string // TCP: the token's principal
}

type whoKey struct{}

func whoFrom(r *http.Request) who {
	w, _ := r.Context().Value(whoKey{}).(who)
	return w
}

// Handler returns the API for the unix socket: its peers passed the
// socket's 0600 mode, so they are the operator and may name any principal.
func (s *Server) Handler() http.Handler { return guard(readBodies(s.mux())) }

// TCPHandler returns the API for the loopback listener: every request
// needs a bearer token, which fixes the principal (and from then on
// counts its connection as the principal's, see maxConnsPerClient).
func (s *Server) TCPHandler() http.Handler {
	m := readBodies(s.mux())
	return guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			writeErr(w, http.StatusUnauthorized, api.CodeUnauthorized, "missing bearer token (Authorization: Bearer TOKEN)")
			return
		}
		p, ok := s.principalFor(tok)
		if !ok {
			s.log.Warn("rejected a TCP request with an unknown token", "remote", r.RemoteAddr, "path", r.URL.Path)
			writeErr(w, http.StatusUnauthorized, api.CodeUnauthorized, "unknown token")
			return
		}
		if lc := connFrom(r); lc != nil {
			if over, client := lc.bindPrincipal(p); over {
				tooManyConns(w, client)
				return
			}
		}
		ctx := context.WithValue(r.Context(), whoKey{}, who{tcp: true, principal: p})
		m.ServeHTTP(w, r.WithContext(ctx))
	}))
}

// principalFor compares the token's hash with every configured hash in
// constant time, so response timing says nothing about near misses.
func (s *Server) principalFor(tok string) (string, bool) {
	h := sha256.Sum256([]byte(tok))
	found := ""
	for k, p := range s.tokens {
		if subtle.ConstantTimeCompare(h[:], k[:]) == 1 {
			found = p
		}
	}
	return found, found != ""
}

func (s *Server) mux() *http.ServeMux {
	m := http.NewServeMux()
	for _, rt := range s.routes() { // openapi.go: the table the document is made from
		if rt.mount != nil {
			m.Handle(rt.pattern, rt.mount())
		} else {
			m.HandleFunc(rt.pattern, rt.handler)
		}
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, api.CodeInvalidRequest, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	return m
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	st := "ok"
	if s.isDraining() {
		st = "shutting-down"
	}
	ready, _, _, states := s.rt.Progress.Snapshot()
	var figs *api.RuntimeFigures
	if !whoFrom(r).tcp {
		figs = runtimeFigures()
	}
	writeJSON(w, http.StatusOK, api.Health{
		Status:         st,
		Ready:          ready,
		CapsuleStates:  states,
		Version:        s.rt.Version,
		Engine:         s.rt.Engine,
		Contracts:      contracts(),
		Capsules:       len(s.rt.Host.Capsules()),
		CapsulesFailed: len(s.rt.Failures()),
		UptimeMS:       time.Since(s.rt.Started).Milliseconds(),
		Principal:      whoFrom(r).principal,
		Cluster:        s.rt.cluster.health(r.Context()),
		Runtime:        figs,
	})
}

// runtimeFigures are the operator's health figures of this process.
func runtimeFigures() *api.RuntimeFigures {
	f := &api.RuntimeFigures{Goroutines: runtime.NumGoroutine(), FDs: -1}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		f.FDs = len(ents) - 1 // less the directory's own descriptor
	}
	ms := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(ms) // no stop of the world, unlike ReadMemStats
	if ms[0].Value.Kind() == metrics.KindUint64 {
		f.HeapLiveBytes = ms[0].Value.Uint64()
	}
	if ms[1].Value.Kind() == metrics.KindUint64 {
		f.GCCycles = ms[1].Value.Uint64()
	}
	return f
}

// contracts is the contract packages this binary serves.
func contracts() []string {
	var out []string
	for _, p := range wit.Packages() {
		out = append(out, p.ID())
	}
	return out
}

func (s *Server) capsules(w http.ResponseWriter, r *http.Request) {
	l := api.CapsuleList{Capsules: s.rt.CapsuleViews()}
	for _, f := range s.rt.Failures() {
		l.Failed = append(l.Failed, FailureView(f))
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) capsule(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	for _, c := range s.rt.CapsuleViews() {
		if c.Name == name {
			writeJSON(w, http.StatusOK, c)
			return
		}
	}
	msg := fmt.Sprintf("no capsule %q is loaded", name)
	for _, f := range s.rt.Failures() {
		if f.Name == name {
			msg += fmt.Sprintf(": it failed to load from %s: %v", f.Dir, f.Err)
		}
	}
	writeErr(w, http.StatusNotFound, api.CodeNoSuchCapsule, msg)
}

func (s *Server) call(w http.ResponseWriter, r *http.Request) {
	if s.isDraining() {
		writeErr(w, http.StatusServiceUnavailable, api.CodeShuttingDown, "the daemon is shutting down")
		return
	}
	var req api.CallRequest
	if !decodeBody(w, r, maxBody, "call body", &req) {
		return
	}
	if req.Capsule == "" || req.Tool == "" {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, "call body: capsule and tool are required")
		return
	}
	if len(req.Input) == 0 {
		req.Input = json.RawMessage("{}")
	}
	wh := whoFrom(r)
	if wh.tcp {
		if req.Principal != "" && req.Principal != wh.principal {
			s.log.Warn("refused a call naming another principal", "capsule", req.Capsule, "tool", req.Tool, "principal", wh.principal, "asked_for", req.Principal)
			writeErr(w, http.StatusForbidden, api.CodeForbidden, fmt.Sprintf("your token is for principal %q; it cannot act as %q", wh.principal, req.Principal))
			return
		}
		req.Principal = wh.principal
	}
	ctx := r.Context()
	if req.Principal != "" {
		ctx = host.WithPrincipal(ctx, req.Principal)
	}
	start := time.Now()
	res, err := s.rt.Host.Call(ctx, req.Capsule, req.Tool, string(req.Input))
	d := time.Since(start)
	lg := s.log.With("capsule", req.Capsule, "tool", req.Tool, "principal", req.Principal, "ms", d.Milliseconds())
	if err != nil {
		ae := callError(err)
		lg.Info("call failed", "code", ae.Code, "tool_code", ae.ToolCode, "err", err)
		writeJSON(w, ae.Status, api.ErrorResponse{Error: api.ErrorBody{Code: ae.Code, Message: ae.Message, ToolCode: ae.ToolCode}})
		return
	}
	lg.Debug("call", "instance", res.Instance)
	out := json.RawMessage(res.Output)
	if !json.Valid(out) {
		b, _ := json.Marshal(res.Output)
		out = b
	}
	writeJSON(w, http.StatusOK, api.CallResponse{Output: out, Instance: res.Instance, DurationMS: d.Milliseconds()})
}

// callError is a failed call as the API answers it (HTTP and the
// daemon's MCP alike): the class of the host's typed error and, for a
// tool's typed error, its code.
func callError(err error) *api.Error {
	status, code := classifyCall(err)
	ae := &api.Error{Status: status, Code: code, Message: err.Error()}
	var te *host.ToolError
	if errors.As(err, &te) {
		if tc, msg, ok := toolCode(te.Message); ok {
			ae.ToolCode = tc
			ae.Message = (&host.ToolError{Capsule: te.Capsule, Tool: te.Tool, Message: msg}).Error()
		}
	}
	return ae
}

// CallError is a host call error as the API answers it, with a tool's
// typed code (tool_code) decoded: callers outside the daemon (the demo)
// branch on ae.ToolCode, never on the message.
func CallError(err error) *api.Error { return callError(err) }

// toolCodeRE is the form of a typed tool error code.
var toolCodeRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`)

// toolCode decodes the guest contract's typed-error convention: a tool's
// err string that is exactly the JSON object {"code": CODE, "message":
// TEXT} (CODE matching toolCodeRE; the SDK writes it for sdk.Error and
// every process error) carries CODE, passed through as the API's
// tool_code. Any other err string is plain text (ok false). It parses a
// documented structure; it does not guess from words.
func toolCode(s string) (code, msg string, ok bool) {
	if !strings.HasPrefix(s, "{") {
		return "", "", false
	}
	var v struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if d.Decode(&v) != nil || d.More() || !toolCodeRE.MatchString(v.Code) {
		return "", "", false
	}
	return v.Code, v.Message, true
}

// classifyCall maps the host's typed errors to HTTP status and API code.
func classifyCall(err error) (int, string) {
	var te *host.ToolError
	switch {
	case errors.As(err, &te):
		return http.StatusUnprocessableEntity, api.CodeToolError
	case errors.Is(err, host.ErrUnknownCapsule):
		return http.StatusNotFound, api.CodeNoSuchCapsule
	case errors.Is(err, host.ErrUnknownTool):
		return http.StatusNotFound, api.CodeNoSuchTool
	case errors.Is(err, host.ErrInvalidPrincipal), errors.Is(err, host.ErrInvalidInput):
		// ErrInvalidInput: the input is not UTF-8 or breaks the tool's
		// declared schema; the message names the path and the rule.
		return http.StatusBadRequest, api.CodeInvalidRequest
	case errors.Is(err, host.ErrTimeout):
		return http.StatusGatewayTimeout, api.CodeTimeout
	case errors.Is(err, host.ErrTrap):
		return http.StatusInternalServerError, api.CodeTrap
	case errors.Is(err, registry.ErrInvalidInput):
		return http.StatusBadRequest, api.CodeInvalidRequest
	case errors.Is(err, host.ErrCancelled), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, api.CodeCancelled
	case errors.Is(err, host.ErrClosed):
		return http.StatusServiceUnavailable, api.CodeShuttingDown
	}
	return http.StatusInternalServerError, api.CodeInternal
}

// visible returns the process if this caller may see it. On TCP, a
// process of another principal is exactly as absent as an unknown ID.
//
// id may be a unique prefix of at least 8 characters (the operator
// view's convenience, never a guest's): the returned Info's ID is the
// full one, which the caller must use from then on.
func (s *Server) visible(r *http.Request, id string) (registry.Info, error) {
	id, err := s.fullID(r, id)
	if err != nil {
		return registry.Info{}, err
	}
	info, err := s.rt.Registry.OperatorStatus(id)
	if err != nil {
		return registry.Info{}, err
	}
	if wh := whoFrom(r); wh.tcp && info.Principal != wh.principal {
		return registry.Info{}, registry.ErrNoSuchProcess
	}
	return info, nil
}

func (s *Server) processes(w http.ResponseWriter, r *http.Request) {
	f := registry.OperatorFilter{Capsule: r.URL.Query().Get("capsule"), Principal: r.URL.Query().Get("principal")}
	if wh := whoFrom(r); wh.tcp {
		if f.Principal != "" && f.Principal != wh.principal {
			writeErr(w, http.StatusForbidden, api.CodeForbidden, fmt.Sprintf("your token is for principal %q; it cannot list %q's processes", wh.principal, f.Principal))
			return
		}
		f.Principal = wh.principal
	}
	infos := s.rt.Registry.OperatorList(f)
	out := api.ProcessList{Processes: make([]api.Process, 0, len(infos))}
	for _, in := range infos {
		out.Processes = append(out.Processes, s.rt.ProcessView(in))
	}
	s.rt.cluster.listOthers(r.Context(), f, &out)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) process(w http.ResponseWriter, r *http.Request) {
	info, err := s.visible(r, r.PathValue("id"))
	if err != nil {
		writeRegErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.rt.ProcessView(info))
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	stream := registry.Stdout
	switch q.Get("stream") {
	case "", "stdout":
	case "stderr":
		stream = registry.Stderr
	default:
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, fmt.Sprintf("stream %q: want stdout or stderr", q.Get("stream")))
		return
	}
	max := defaultReadMax
	if v := q.Get("max"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, fmt.Sprintf("max %q: want a positive byte count", v))
			return
		}
		max = min(n, 16<<20)
	}
	var cursor *string
	if v := q.Get("cursor"); v != "" {
		cursor = &v
	}
	info, err := s.visible(r, id)
	if err != nil {
		writeRegErr(w, err)
		return
	}
	id = info.ID
	read := func() (api.LogChunk, error) {
		ch, err := s.rt.Registry.OperatorReadSince(id, stream, cursor, uint32(max))
		if err != nil {
			return api.LogChunk{}, err
		}
		return apiChunk(ch), nil
	}
	if f := q.Get("follow"); f != "1" && f != "true" {
		ch, err := read()
		if err != nil {
			writeRegErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, ch)
		return
	}
	s.follow(w, r, info, read, func(next string) { cursor = &next })
}

// follow streams JSON lines of log chunks until EOF, the client leaves, or
// the daemon shuts down. Between reads it waits for the process's next
// write or its exit (logWake).
func (s *Server) follow(w http.ResponseWriter, r *http.Request, info registry.Info, read func() (api.LogChunk, error), advance func(string)) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	enc := json.NewEncoder(w)
	last := time.Now()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	wake := newLogWake(ctx, s.rt.Registry, info.ID)
	for {
		wake.arm() // before the read: a write after it ends the wait
		ch, err := read()
		if err != nil {
			code, _ := regCode(err)
			_ = enc.Encode(api.ErrorResponse{Error: api.ErrorBody{Code: code, Message: err.Error()}})
			return
		}
		if len(ch.Data) > 0 || ch.BytesDropped > 0 || ch.EOF || time.Since(last) >= followKeepalive {
			if err := enc.Encode(ch); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
			last = time.Now()
		}
		if ch.EOF {
			return
		}
		if ch.Next != "" {
			advance(ch.Next)
		}
		if len(ch.Data) > 0 {
			continue // more may be buffered: read again at once
		}
		wake.wait()
		select {
		case <-r.Context().Done():
			return
		case <-s.stopping:
			_ = enc.Encode(api.ErrorResponse{Error: api.ErrorBody{Code: api.CodeShuttingDown, Message: "the daemon is shutting down"}})
			return
		default:
		}
	}
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.StopRequest
	if r.ContentLength != 0 && !decodeBody(w, r, 4096, "stop body", &req) {
		return
	}
	var grace *time.Duration
	if req.GraceMS != nil {
		if g := *req.GraceMS; g < 0 || g > maxGraceMS {
			writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, fmt.Sprintf("grace_ms %d is out of range [0, %d]", g, maxGraceMS))
			return
		}
		g := time.Duration(*req.GraceMS) * time.Millisecond
		grace = &g
	}
	info, err := s.visible(r, id)
	if err != nil {
		writeRegErr(w, err)
		return
	}
	id = info.ID
	lg := s.log.With("capsule", info.Capsule, "principal", info.Principal, "proc", s.rt.Registry.LogID(id))
	lg.Info("stopping process", "by", s.by(r), "grace", graceText(grace))
	// Once asked, a stop runs to its end even if the client goes away: a
	// stop abandoned between SIGTERM and SIGKILL would leave the process in
	// limbo. The registry bounds it (grace cap plus the forced kill).
	ex, err := s.rt.Registry.OperatorStop(context.WithoutCancel(r.Context()), id, grace)
	if err != nil {
		lg.Warn("stop failed", "err", err)
		writeRegErr(w, err)
		return
	}
	e := s.rt.stoppedExit(id, ex)
	lg.Info("process stopped", "exit", api.ExitText(&e))
	writeJSON(w, http.StatusOK, api.StopResponse{Exit: e})
}

func (s *Server) by(r *http.Request) string {
	if wh := whoFrom(r); wh.tcp {
		return "tcp:" + wh.principal
	}
	return "socket"
}

func graceText(g *time.Duration) string {
	if g == nil {
		return "default"
	}
	return g.String()
}

// regCode maps a registry error class to HTTP status and API code.
func regCode(err error) (string, int) {
	switch {
	case errors.Is(err, registry.ErrNoSuchProcess):
		return api.CodeNoSuchProcess, http.StatusNotFound
	case errors.Is(err, registry.ErrInvalidInput):
		return api.CodeInvalidRequest, http.StatusBadRequest
	case errors.Is(err, context.Canceled):
		return api.CodeCancelled, http.StatusServiceUnavailable
	}
	return regCodeTerminal(err) // terminal.go: the classes the terminal endpoints add
}

func writeRegErr(w http.ResponseWriter, err error) {
	code, status := regCode(err)
	msg := err.Error()
	if code == api.CodeNoSuchProcess {
		// One message for unknown, malformed, released, reaped and
		// not-yours: nothing to tell them apart.
		msg = "no such process"
	}
	writeErr(w, status, code, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.ErrorResponse{Error: api.ErrorBody{Code: code, Message: msg}})
}

// ProcessView converts a registry Info to the wire form.
func (rt *Runtime) ProcessView(in registry.Info) api.Process {
	p := processView(in)
	p.LogID = rt.Registry.LogID(in.ID)
	return p
}

// processView is in for the API, without its log ID (which only the
// holding node can compute).
func processView(in registry.Info) api.Process {
	p := api.Process{
		ID: in.ID, Node: in.Node, Capsule: in.Capsule, Principal: in.Principal,
		Label: in.Label, Command: in.Command, PID: in.OSPid,
		AgeMS: in.Age.Milliseconds(), IdleMS: in.Idle.Milliseconds(),
		BufferedBytes: in.BufferedBytes, BytesDropped: in.BytesDropped, StdinOpen: in.StdinOpen,
		MemPeakBytes: in.MemPeak, Phase: in.Phase.String(),
	}
	if in.Reason != nil {
		p.Reason = in.Reason.String()
	}
	if in.Exit != nil {
		e := ExitView(*in.Exit)
		e.Reason = p.Reason
		p.Exit = &e
	}
	if in.CPU != nil {
		ms := in.CPU.Milliseconds()
		p.CPUMS = &ms
	}
	terminalView(in, &p) // terminal.go
	return p
}

// ExitView converts a registry Exit.
func ExitView(e registry.Exit) api.Exit { return api.Exit{ExitCode: e.Code, Signal: e.Signal} }

// stoppedExit is the exit of a process just stopped, with its reason.
func (rt *Runtime) stoppedExit(id string, ex registry.Exit) api.Exit {
	e := ExitView(ex)
	if info, err := rt.Registry.OperatorStatus(id); err == nil && info.Reason != nil {
		e.Reason = info.Reason.String()
	}
	return e
}

// reload re-reads the capsule directories (POST /v1/reload). Operator
// only: it changes what every principal is served, so a TCP token (one
// principal) may not ask for it.
func (s *Server) reload(w http.ResponseWriter, r *http.Request) {
	if wh := whoFrom(r); wh.tcp {
		s.log.Warn("refused a reload over TCP", "principal", wh.principal)
		writeErr(w, http.StatusForbidden, api.CodeForbidden, "reload is an operator command: use the unix socket")
		return
	}
	if s.isDraining() {
		writeErr(w, http.StatusServiceUnavailable, api.CodeShuttingDown, "the daemon is shutting down")
		return
	}
	var req api.ReloadRequest
	if r.ContentLength != 0 && !decodeBody(w, r, 4096, "reload body", &req) {
		return
	}
	s.log.Info("reload requested", "by", s.by(r), "capsule", req.Capsule)
	// Once asked, a reload runs to its end even if the client goes away:
	// each capsule's swap is atomic, but a half-done reload would report
	// nothing to anyone.
	res, err := s.rt.Reload(context.WithoutCancel(r.Context()), req.Capsule)
	switch {
	case errors.Is(err, ErrNoSuchCapsule):
		writeErr(w, http.StatusNotFound, api.CodeNoSuchCapsule, err.Error())
	case errors.Is(err, ErrConfig):
		writeErr(w, http.StatusUnprocessableEntity, api.CodeConfigError, err.Error())
	case errors.Is(err, host.ErrClosed):
		writeErr(w, http.StatusServiceUnavailable, api.CodeShuttingDown, err.Error())
	case err != nil:
		writeErr(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
	default:
		writeJSON(w, http.StatusOK, ReloadView(res))
	}
}

// apiChunk is a registry chunk on the operator API, capture times included.
func apiChunk(ch registry.LogChunk) api.LogChunk {
	out := api.LogChunk{Data: ch.Data, Next: ch.Next, BytesDropped: ch.BytesDropped, EOF: ch.EOF}
	for _, t := range ch.Times {
		out.Times = append(out.Times, api.LogTime{At: t.At, UnixNano: t.UnixNano})
	}
	return out
}

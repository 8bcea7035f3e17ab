package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
)

// The process tools work on the daemon's process API, scoped to this
// server's principal: a process of another principal is exactly as absent
// as an unknown ID. Writing to stdin stays a capsule tool (the shell
// capsule's write_process_stdin): stdin is the capsule's capability, and
// the operator API has no write endpoint.
const (
	listProcSchema = `{"type":"object","additionalProperties":false,"properties":{
"capsule":{"type":"string","description":"Only this capsule's processes."},
"label":{"type":"string","description":"Only processes whose label contains this."}}}`
	readProcSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{
"id":{"type":"string"},
"stream":{"enum":["stdout","stderr"],"description":"Default stdout."},
"cursor":{"type":"string","description":"The next cursor of an earlier read. Omit to read from the oldest retained byte."},
"max_bytes":{"type":"integer","minimum":1,"maximum":1048576,"description":"Default 65536."}}}`
	idSchema       = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{"id":{"type":"string"}}}`
	stopProcSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{
"id":{"type":"string"},"grace_ms":{"type":"integer","minimum":0,"description":"SIGKILL after this long. Default: the host's stop_grace."}}}`
)

func (s *Server) addProcessTools() {
	s.srv.AddTool(&mcp.Tool{Name: "list_processes", InputSchema: json.RawMessage(listProcSchema),
		Description: "Lists this principal's persistent processes (running and recently exited) in every capsule, with their resource URIs. Use it to find your background processes again after losing context."},
		s.toolListProcesses)
	s.srv.AddTool(&mcp.Tool{Name: "read_process_output", InputSchema: json.RawMessage(readProcSchema),
		Description: "Reads a persistent process's stdout or stderr from a cursor without consuming it. Returns the text, the next cursor, bytes lost to the log limits, and eof once the process exited and all output was read."},
		s.toolReadProcess)
	s.srv.AddTool(&mcp.Tool{Name: "process_status", InputSchema: json.RawMessage(idSchema),
		Description: "Shows one persistent process: capsule, label, command, phase (starting, running, exited), exit and reason, age, buffered and dropped bytes."},
		s.toolProcessStatus)
	s.srv.AddTool(&mcp.Tool{Name: "stop_process", InputSchema: json.RawMessage(stopProcSchema),
		Description: "Stops a persistent process: SIGTERM to its process tree, then SIGKILL after grace_ms. Returns its exit. Its output stays readable until the host forgets it."},
		s.toolStopProcess)
}

// decodeArgs decodes a tool's arguments strictly (the SDK leaves raw
// handlers unvalidated): an unknown field is an invalid request, as the
// daemon says for capsule tools.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("arguments: %v", err)
	}
	return nil
}

func invalid(format string, a ...any) error {
	return &api.Error{Status: http.StatusBadRequest, Code: api.CodeInvalidRequest, Message: fmt.Sprintf(format, a...)}
}

// errNoProcess is the one answer for unknown, malformed, released and
// not-this-principal's IDs.
func errNoProcess() error {
	return &api.Error{Status: http.StatusNotFound, Code: api.CodeNoSuchProcess, Message: "no such process"}
}

// own returns the process if it belongs to this server's principal.
func (s *Server) own(ctx context.Context, id string) (api.Process, error) {
	if id == "" {
		return api.Process{}, invalid(`"id" is required`)
	}
	p, err := s.d.Process(ctx, id)
	if err != nil {
		return api.Process{}, err
	}
	if p.Principal != s.o.Principal {
		return api.Process{}, errNoProcess()
	}
	return p, nil
}

// processView is a process as the tools and resources show it: the API
// view without the daemon's log hash, plus its resource URIs.
type processView struct {
	api.Process
	LogID     string            `json:"log_id,omitempty"`
	Resources map[string]string `json:"resources"`
}

func view(p api.Process) processView {
	return processView{Process: p, Resources: map[string]string{
		"status": ProcessURI(p.ID, "status"), "stdout": ProcessURI(p.ID, "stdout"), "stderr": ProcessURI(p.ID, "stderr"),
	}}
}

func (s *Server) mine(ctx context.Context, capsule string) ([]api.Process, error) {
	ps, err := s.d.Processes(ctx, capsule, s.o.Principal)
	if err != nil {
		return nil, err
	}
	out := ps[:0]
	for _, p := range ps {
		if p.Principal == s.o.Principal {
			out = append(out, p)
		}
	}
	return out, nil
}

func (s *Server) toolListProcesses(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct{ Capsule, Label string }
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return errorResult(err), nil
	}
	ps, err := s.mine(ctx, in.Capsule)
	if err != nil {
		return errorResult(err), nil
	}
	views := []processView{}
	for _, p := range ps {
		if in.Label == "" || strings.Contains(p.Label, in.Label) {
			views = append(views, view(p))
		}
	}
	return jsonResult(map[string]any{"processes": views})
}

// readArgs is the input of read_process_output.
type readArgs struct {
	ID       string `json:"id"`
	Stream   string `json:"stream"`
	Cursor   string `json:"cursor"`
	MaxBytes int    `json:"max_bytes"`
}

// chunkView is one read: text when the bytes are UTF-8, else base64.
type chunkView struct {
	Text         *string `json:"text,omitempty"`
	Base64       []byte  `json:"base64,omitempty"`
	Next         string  `json:"next"`
	BytesDropped uint64  `json:"bytes_dropped"`
	EOF          bool    `json:"eof"`
}

func (s *Server) read(ctx context.Context, in readArgs) (api.LogChunk, error) {
	switch in.Stream {
	case "", "stdout", "stderr":
	default:
		return api.LogChunk{}, invalid("stream %q: want stdout or stderr", in.Stream)
	}
	if in.MaxBytes < 0 || in.MaxBytes > 1<<20 {
		return api.LogChunk{}, invalid("max_bytes %d: want 1 to 1048576", in.MaxBytes)
	}
	if _, err := s.own(ctx, in.ID); err != nil {
		return api.LogChunk{}, err
	}
	return s.d.Logs(ctx, in.ID, api.LogQuery{Stream: in.Stream, Cursor: in.Cursor, Max: in.MaxBytes})
}

func (s *Server) toolReadProcess(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in readArgs
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return errorResult(err), nil
	}
	ch, err := s.read(ctx, in)
	if err != nil {
		return errorResult(err), nil
	}
	v := chunkView{Next: ch.Next, BytesDropped: ch.BytesDropped, EOF: ch.EOF}
	if utf8.Valid(ch.Data) {
		t := string(ch.Data)
		v.Text = &t
	} else {
		v.Base64 = ch.Data
	}
	return jsonResult(v)
}

func (s *Server) toolProcessStatus(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct{ ID string }
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return errorResult(err), nil
	}
	p, err := s.own(ctx, in.ID)
	if err != nil {
		return errorResult(err), nil
	}
	return jsonResult(view(p))
}

func (s *Server) toolStopProcess(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		ID      string `json:"id"`
		GraceMS *int64 `json:"grace_ms"`
	}
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return errorResult(err), nil
	}
	var grace *time.Duration
	if in.GraceMS != nil {
		if *in.GraceMS < 0 {
			return errorResult(invalid("grace_ms %d: want >= 0", *in.GraceMS)), nil
		}
		g := time.Duration(*in.GraceMS) * time.Millisecond
		grace = &g
	}
	if _, err := s.own(ctx, in.ID); err != nil {
		return errorResult(err), nil
	}
	ex, err := s.d.Stop(ctx, in.ID, grace)
	if err != nil {
		return errorResult(err), nil
	}
	return jsonResult(map[string]any{"id": in.ID, "exit": ex, "exit_text": api.ExitText(&ex)})
}

// jsonResult is a successful process tool's answer: the value as
// structuredContent and as indented JSON text.
func jsonResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return callResult(b), nil
}

// uriScheme prefixes every resource of this server.
const uriScheme = "capsule-host://"

// ProcessURI is the resource URI of a process's stream ("status",
// "stdout" or "stderr").
func ProcessURI(id, stream string) string {
	return uriScheme + "process/" + url.PathEscape(id) + "/" + stream
}

// procRef is a parsed process URI.
type procRef struct {
	id, stream, cursor string
	max                int
}

// parseProcessURI parses capsule-host://process/ID/STREAM[?cursor=C&max=N].
func parseProcessURI(raw string) (procRef, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme+"://" != uriScheme || u.Host != "process" {
		return procRef{}, false
	}
	parts := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	if len(parts) != 2 {
		return procRef{}, false
	}
	id, err := url.PathUnescape(parts[0])
	if err != nil || id == "" {
		return procRef{}, false
	}
	r := procRef{id: id, stream: parts[1], cursor: u.Query().Get("cursor")}
	switch r.stream {
	case "status", "stdout", "stderr":
	default:
		return procRef{}, false
	}
	if m := u.Query().Get("max"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n <= 0 || n > 1<<20 {
			return procRef{}, false
		}
		r.max = n
	}
	return r, true
}

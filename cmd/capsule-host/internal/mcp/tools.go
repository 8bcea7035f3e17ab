package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
)

// sep joins capsule and tool in an MCP tool name. Capsule names are
// [a-z0-9][a-z0-9-]{0,62} and tool names [a-z0-9_]{1,64}, so the first
// "__" always ends the capsule name.
const sep = "__"

// maxToolName is MCP's limit on a tool name.
const maxToolName = 128

// ToolName is the MCP name of a capsule's tool, or "" when the pair does
// not fit MCP's 128 characters (a 63-character capsule name with a
// 64-character tool name).
func ToolName(capsule, tool string) string {
	n := capsule + sep + tool
	if len(n) > maxToolName {
		return ""
	}
	return n
}

// SplitToolName is the inverse of ToolName.
func SplitToolName(name string) (capsule, tool string, ok bool) {
	c, t, ok := strings.Cut(name, sep)
	return c, t, ok && c != "" && t != ""
}

// toolRef is one synced capsule tool; sig tells a changed description or
// schema from an unchanged one, so a sync re-adds (and notifies) only what
// changed.
type toolRef struct {
	capsule, tool string
	sig           string
}

// SyncTools makes the MCP tool list match the daemon's capsules: new and
// changed tools are added, vanished ones removed. The SDK then sends
// notifications/tools/list_changed to the connected sessions.
func (s *Server) SyncTools(ctx context.Context) error {
	caps, err := s.d.Capsules(ctx)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range caps {
		for _, t := range c.Tools {
			name := ToolName(c.Name, t.Name)
			if name == "" {
				s.log.Warn("a capsule tool's MCP name would exceed 128 characters; not offered over MCP", "capsule", c.Name, "tool", t.Name)
				continue
			}
			want[name] = true
			schema := toolSchema(t.InputSchema)
			sig := c.Version + "\x00" + t.Description + "\x00" + string(schema)
			if old, ok := s.tools[name]; ok && old.sig == sig {
				continue
			}
			s.tools[name] = toolRef{capsule: c.Name, tool: t.Name, sig: sig}
			s.srv.AddTool(&mcp.Tool{
				Name: name, Title: c.Name + " " + t.Name,
				Description: t.Description, InputSchema: schema,
			}, s.callCapsuleTool(c.Name, t.Name))
		}
	}
	var gone []string
	for name := range s.tools {
		if !want[name] {
			gone = append(gone, name)
			delete(s.tools, name)
		}
	}
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
	return nil
}

// toolSchema is the tool's declared JSON Schema, or the empty object
// schema for a tool that declares none. MCP requires type "object" at the
// top; a schema without it gets it (the host still validates the input
// against the declared schema).
func toolSchema(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(`{"type":"object"}`)
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return json.RawMessage(`{"type":"object"}`)
	}
	if m["type"] == "object" {
		return raw
	}
	m["type"] = "object"
	b, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage(`{"type":"object"}`)
	}
	return b
}

// progressEvery is how often a long call tells a client that asked for
// progress (a progress token) that it still runs.
const progressEvery = time.Second

// callCapsuleTool is the handler of one capsule tool: the call goes to the
// daemon as this server's principal. Cancellation (notifications/
// cancelled, or the client leaving) cancels ctx, which cancels the HTTP
// request, which the daemon turns into the guest's interruption.
func (s *Server) callCapsuleTool(capsule, tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.Arguments
		if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
			args = json.RawMessage("{}")
		}
		stop := s.progress(ctx, req)
		res, err := s.d.Call(ctx, api.CallRequest{Capsule: capsule, Tool: tool, Input: args, Principal: s.o.Principal})
		stop()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var ae *api.Error
			if errors.As(err, &ae) && (ae.Code == api.CodeNoSuchCapsule || ae.Code == api.CodeNoSuchTool) {
				// The daemon no longer has it: refresh, so the list (and
				// list_changed) follow.
				if serr := s.SyncTools(ctx); serr != nil {
					s.log.Warn("refreshing the tool list", "err", serr)
				}
			}
			return errorResult(err), nil
		}
		out := callResult(res.Output)
		out.Meta = mcp.Meta{"capsule-host/instance": res.Instance, "capsule-host/duration_ms": res.DurationMS}
		return out, nil
	}
}

// progress sends a progress notification every progressEvery while the
// call runs, when the client gave a progress token. The returned func
// stops it.
func (s *Server) progress(ctx context.Context, req *mcp.CallToolRequest) func() {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		start := time.Now()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: tok, Progress: float64(n),
					Message: fmt.Sprintf("still running after %s", time.Since(start).Round(time.Second)),
				})
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// callResult renders a tool's output: structuredContent is the output when
// it is a JSON object, else {"result": output} (MCP wants an object there);
// the text is the output itself when it is a JSON string, else its JSON.
// Valid output goes on as raw JSON, as the SDK does for typed tools: not
// decoded into maps and encoded again per call, and its numbers and key
// order stay as the tool wrote them.
func callResult(out json.RawMessage) *mcp.CallToolResult {
	t := bytes.TrimSpace(out)
	if !json.Valid(t) {
		// Not JSON (the daemon sends JSON; this is the fallback): a string.
		s := string(out)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}, StructuredContent: map[string]any{"result": s}}
	}
	text := string(out)
	if t[0] == '"' {
		var str string
		if json.Unmarshal(t, &str) == nil {
			text = str
		}
	}
	structured := json.RawMessage(t)
	if t[0] != '{' {
		structured = json.RawMessage(`{"result":` + string(t) + `}`)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: structured}
}

// CodeUnreachable is the error code of a call the daemon did not answer
// (it stopped, or its socket went away).
const CodeUnreachable = "unreachable"

// ErrorCode is the typed reason of a failed call: the daemon's stable API
// code (tool-error, trap, timeout, invalid-request, ...), unreachable when
// no daemon answered, internal otherwise.
func ErrorCode(err error) string {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		return ae.Code
	case errors.Is(err, api.ErrUnreachable):
		return CodeUnreachable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return api.CodeCancelled
	}
	return api.CodeInternal
}

// errorResult is a failed call as MCP wants it: isError with the message
// as text, and the typed code in structuredContent.error.code (and
// _meta), for clients that branch on it.
func errorResult(err error) *mcp.CallToolResult {
	code := ErrorCode(err)
	msg := err.Error()
	var ae *api.Error
	body := map[string]any{"code": code}
	if errors.As(err, &ae) {
		msg = ae.Message
		if ae.ToolCode != "" {
			body["tool_code"] = ae.ToolCode // the tool's typed code, as on the HTTP API
		}
	}
	body["message"] = msg
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: code + ": " + msg}},
		StructuredContent: map[string]any{"error": body},
		Meta:              mcp.Meta{"capsule-host/error-code": code},
	}
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/capsules/sdk"
	"github.com/capsule-host/capsule-host/capsules/sdk/process"
)

// protocolVersion is the MCP version this client asks for; the server
// answers with the one it speaks, returned by start_server.
const protocolVersion = "2025-06-18"

// Timeouts: each call waits for its response at most timeout_ms, under
// the host's per-call deadline (30 s by default).
const (
	defaultTimeoutMS = 20_000
	maxTimeoutMS     = 25_000
	maxLabelBytes    = 128
)

const (
	startDesc   = `Starts a third-party MCP server that speaks stdio (one JSON-RPC message per line) as a persistent process, performs the MCP initialize handshake, and returns its id with the server's info and capabilities. The server keeps running across calls: use list_tools and call_tool with the id, stop_server to end it. The command must be granted by the capsule's manifest (node and npx by default).`
	startSchema = `{"type":"object","additionalProperties":false,"required":["command"],"properties":{
"command":{"type":"string","minLength":1,"description":"The program, e.g. node or npx (a bare name is looked up on the sandbox PATH)."},
"args":{"type":"array","items":{"type":"string"},"description":"Its arguments, e.g. [\"/path/to/server.js\",\"stdio\"]."},
"env":{"type":"object","additionalProperties":{"type":"string"},"description":"Extra environment variables."},
"cwd":{"type":"string","description":"Working directory inside the capsule's workspace."},
"label":{"type":"string","maxLength":128,"description":"A label for list_processes (default: the command line)."},
"timeout_ms":{"type":"integer","minimum":1,"maximum":25000,"description":"How long to wait for the initialize response (default 20000)."}}}`

	listDesc   = `Lists the tools of an MCP server started with start_server (MCP tools/list). Pass the "cursor" of your previous result of this server to get back, with this result, every notification the server sent since (without it: none from before this call); "page" fetches the next page of a paginated list.`
	listSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{
"id":{"type":"string","minLength":1},
"cursor":{"type":"string","description":"The cursor a previous result of this server returned."},
"page":{"type":"string","description":"The server's nextCursor, for the next page."},
"timeout_ms":{"type":"integer","minimum":1,"maximum":25000}}}`

	callDesc   = `Calls one tool of an MCP server started with start_server (MCP tools/call) and returns the server's result (content, structuredContent, isError as the server set them), with the notifications the server sent meanwhile (since "cursor", if you pass the one your previous result of this server returned).`
	callSchema = `{"type":"object","additionalProperties":false,"required":["id","name"],"properties":{
"id":{"type":"string","minLength":1},
"name":{"type":"string","minLength":1,"description":"The server's tool name, as list_tools shows it."},
"arguments":{"type":"object","description":"The tool's arguments."},
"cursor":{"type":"string","description":"The cursor a previous result of this server returned."},
"timeout_ms":{"type":"integer","minimum":1,"maximum":25000}}}`

	logDesc   = `Reads an MCP server's retained output from a cursor, stderr by default (its log messages), or stdout (the raw JSON-RPC lines, notifications included). Reading never consumes anything.`
	logSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{
"id":{"type":"string","minLength":1},
"stream":{"enum":["stderr","stdout"]},
"cursor":{"type":"string","description":"The next cursor of a previous server_log read of this stream; omit to read from the start."},
"max_bytes":{"type":"integer","minimum":1,"maximum":1048576}}}`

	stopDesc   = `Stops an MCP server (SIGTERM to its process tree, SIGKILL after grace_ms) and forgets it.`
	stopSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{"id":{"type":"string","minLength":1},"grace_ms":{"type":"integer","minimum":0,"maximum":60000}}}`
)

type startIn struct {
	Command   string            `json:"command"`
	Args      []string          `json:"args"`
	Env       map[string]string `json:"env"`
	Cwd       *string           `json:"cwd"`
	Label     *string           `json:"label"`
	TimeoutMS *uint64           `json:"timeout_ms"`
}

type listIn struct {
	ID        string  `json:"id"`
	Cursor    string  `json:"cursor"`
	Page      *string `json:"page"`
	TimeoutMS *uint64 `json:"timeout_ms"`
}

type callIn struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Cursor    string          `json:"cursor"`
	TimeoutMS *uint64         `json:"timeout_ms"`
}

type logIn struct {
	ID       string  `json:"id"`
	Stream   string  `json:"stream"`
	Cursor   *string `json:"cursor"`
	MaxBytes *uint32 `json:"max_bytes"`
}

type stopIn struct {
	ID      string  `json:"id"`
	GraceMS *uint64 `json:"grace_ms"`
}

func deadline(ms *uint64) time.Time {
	d := uint64(defaultTimeoutMS)
	if ms != nil {
		d = min(*ms, maxTimeoutMS)
	}
	return time.Now().Add(time.Duration(d) * time.Millisecond)
}

// out is a result: the server's answer plus what came with it.
func (x exchange) out(key string) (map[string]any, error) {
	if len(x.Error) > 0 {
		return nil, sdk.Errorf("server-error", "the MCP server answered with an error: %s", x.Error)
	}
	res := map[string]any{key: x.Result, "cursor": x.Cursor}
	if len(x.Notes) > 0 || x.Dropped > 0 {
		res["notifications"] = x.Notes
		res["notifications_dropped"] = x.Dropped
	}
	if x.Skipped > 0 {
		res["non_jsonrpc_lines"] = x.Skipped
	}
	return res, nil
}

func startServer(in startIn) (any, error) {
	env := make([]process.EnvVar, 0, len(in.Env))
	for k, v := range in.Env {
		env = append(env, process.EnvVar{Key: k, Value: v})
	}
	label := labelFor(in.Command, in.Args)
	if in.Label != nil {
		label = *in.Label
	}
	id, err := process.SpawnPersistent(process.SpawnRequest{Cmd: in.Command, Args: append([]string{}, in.Args...), Env: env, Cwd: in.Cwd},
		process.PersistOptions{Label: &label, KeepStdinOpen: true})
	if err != nil {
		return nil, fmt.Errorf("start_server: %w", err)
	}
	res, err := initialize(id, deadline(in.TimeoutMS))
	if err != nil {
		// A server that cannot finish the handshake is of no use: stop it
		// rather than leave it for the reaper.
		grace := uint64(0)
		_, _ = process.Stop(id, &grace)
		_ = process.Release(id)
		return nil, fmt.Errorf("start_server: %w", err)
	}
	res["id"] = id
	return res, nil
}

// initialize is the MCP handshake: initialize, then notifications/
// initialized. The log is new, so the response is read from its start.
func initialize(id string, dl time.Time) (map[string]any, error) {
	x, err := request(id, "initialize", map[string]any{
		"protocolVersion": protocolVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "capsule-host-mcp-stdio", "version": "1.0.0"},
	}, nil, 0, dl)
	if err != nil {
		return nil, err
	}
	res, err := x.out("result")
	if err != nil {
		return nil, err
	}
	var ir struct {
		ProtocolVersion string          `json:"protocolVersion"`
		ServerInfo      json.RawMessage `json:"serverInfo"`
		Capabilities    json.RawMessage `json:"capabilities"`
		Instructions    string          `json:"instructions"`
	}
	if err := json.Unmarshal(x.Result, &ir); err != nil || ir.ProtocolVersion == "" {
		return nil, sdk.Errorf("server-error", "the initialize result is not MCP's: %s", x.Result)
	}
	if err := send(id, map[string]any{"method": "notifications/initialized"}); err != nil {
		return nil, err
	}
	delete(res, "result")
	res["protocol_version"], res["server_info"], res["capabilities"] = ir.ProtocolVersion, ir.ServerInfo, ir.Capabilities
	if ir.Instructions != "" {
		res["instructions"] = ir.Instructions
	}
	return res, nil
}

// exchangeOn sends one request to a running server and reads from the
// caller's cursor, or from the end of its log.
func exchangeOn(tool, id, known, method string, params any, dl time.Time) (exchange, error) {
	cur, ev, err := start(id, known)
	if err != nil {
		return exchange{}, fail(tool, err)
	}
	x, err := request(id, method, params, &cur, ev, dl)
	if err != nil {
		return x, fail(tool, err)
	}
	return x, nil
}

func listTools(in listIn) (any, error) {
	var params any
	if in.Page != nil {
		params = map[string]any{"cursor": *in.Page}
	}
	x, err := exchangeOn("list_tools", in.ID, in.Cursor, "tools/list", params, deadline(in.TimeoutMS))
	if err != nil {
		return nil, err
	}
	var lr struct {
		Tools      json.RawMessage `json:"tools"`
		NextCursor string          `json:"nextCursor"`
	}
	if err := json.Unmarshal(x.Result, &lr); err != nil || len(lr.Tools) == 0 {
		return nil, sdk.Errorf("server-error", "the tools/list result is not MCP's: %s", x.Result)
	}
	res, err := x.out("tools")
	if err != nil {
		return nil, err
	}
	res["tools"] = lr.Tools
	if lr.NextCursor != "" {
		res["next_page"] = lr.NextCursor
	}
	return res, nil
}

func callTool(in callIn) (any, error) {
	args := in.Arguments
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	x, err := exchangeOn("call_tool", in.ID, in.Cursor, "tools/call", map[string]any{"name": in.Name, "arguments": args}, deadline(in.TimeoutMS))
	if err != nil {
		return nil, err
	}
	return x.out("result")
}

func serverLog(in logIn) (any, error) {
	stream := process.Stderr
	if in.Stream == "stdout" {
		stream = process.Stdout
	}
	max := uint32(64 << 10)
	if in.MaxBytes != nil {
		max = *in.MaxBytes
	}
	ch, err := process.ReadSince(in.ID, stream, in.Cursor, max)
	if err != nil {
		return nil, fail("server_log", err)
	}
	text := string(ch.Data)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return map[string]any{"text": text, "next": ch.Next, "bytes_dropped": ch.BytesDropped, "eof": ch.EOF}, nil
}

func stopServer(in stopIn) (any, error) {
	e, err := process.Stop(in.ID, in.GraceMS)
	if err != nil {
		return nil, fail("stop_server", err)
	}
	// The one exit shape (RFC §24): exit_code or signal, plus reason.
	ex := map[string]any{}
	if e.ExitCode != nil {
		ex["exit_code"] = *e.ExitCode
	}
	if e.Signal != nil {
		ex["signal"] = *e.Signal
	}
	if st, err := process.Status(in.ID); err == nil && st.ExitReason != nil {
		ex["reason"] = st.ExitReason.String()
	}
	if err := process.Release(in.ID); err != nil {
		return nil, fail("stop_server", err)
	}
	return map[string]any{"id": in.ID, "exit": ex}, nil
}

// fail names the tool; an unknown id gets a hint (the SDK keeps the
// error's code, no-such-process, for the client to branch on).
func fail(tool string, err error) error {
	if errors.Is(err, process.ErrNoSuchProcess) {
		return fmt.Errorf("%s: %w (unknown id, stopped, or started by another caller)", tool, err)
	}
	return fmt.Errorf("%s: %w", tool, err)
}

// labelFor is the default label: the command line, printable, at most
// maxLabelBytes.
func labelFor(cmd string, args []string) string {
	s := "mcp: " + strings.Join(append([]string{cmd}, args...), " ")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > maxLabelBytes {
		s = s[:maxLabelBytes-3]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "..."
	}
	return s
}

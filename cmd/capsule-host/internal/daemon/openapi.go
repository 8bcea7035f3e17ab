package daemon

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"

	api "github.com/capsule-host/capsule-host/client"
)

// OpenAPIPath serves the API's OpenAPI 3.1 document.
const OpenAPIPath = "/v1/openapi.json"

// route is one endpoint: the mux pattern, its handler and what the
// OpenAPI document says of it. The mux is built from this table and the
// document is generated from it and from the client package's Go types,
// so a route or a field cannot be served without being described
// (TestOpenAPIMatchesServer walks every route with real requests).
type route struct {
	pattern string // "METHOD /path/{param}", or a path for every method (mount)
	handler http.HandlerFunc
	// mount makes the handler of a pattern without a method, once per mux.
	mount   func() http.Handler
	methods []string // mount's methods, for the document
	summary string
	query   []string // query parameters (strings)
	req     any      // request body type (nil: none)
	resp    any      // 200 body type (nil: none)
	// stream is the media type of a streamed 200 body of resp items
	// ("": one application/json document).
	stream string
	// external: the body is another protocol's (MCP), described there.
	external string
}

// routes is the API.
func (s *Server) routes() []route {
	return append(s.baseRoutes(), s.terminalRoutes()...) // terminal.go
}

func (s *Server) baseRoutes() []route {
	return []route{
		{pattern: "GET /v1/health", handler: s.health, summary: "Health and readiness (loading with progress while capsules compile at start)", resp: api.Health{}},
		{pattern: "GET " + OpenAPIPath, handler: s.openapi, summary: "This OpenAPI 3.1 document"},
		{pattern: "GET /v1/cluster/nodes", handler: s.nodes, summary: "The cluster's live nodes (operator only; unavailable outside cluster mode)", resp: api.NodeList{}},
		{pattern: "GET /v1/capsules", handler: s.capsules, summary: "Loaded capsules and their tools, and the capsule directories that failed", resp: api.CapsuleList{}},
		{pattern: "GET /v1/capsules/{name}", handler: s.capsule, summary: "One loaded capsule", resp: api.Capsule{}},
		{pattern: "POST /v1/reload", handler: s.reload, summary: "Reload the capsule directories (socket only)", req: api.ReloadRequest{}, resp: api.ReloadResponse{}},
		{pattern: "POST /v1/call", handler: s.call, summary: "Call a tool", req: api.CallRequest{}, resp: api.CallResponse{}},
		{pattern: "GET /v1/processes", handler: s.processes, summary: "Persistent processes (operator view)", query: []string{"capsule", "principal"}, resp: api.ProcessList{}},
		{pattern: "GET /v1/processes/{id}", handler: s.process, summary: "One persistent process", resp: api.Process{}},
		{pattern: "GET /v1/processes/{id}/logs", handler: s.logs, summary: "A slice of one output stream; follow=1 streams one LogChunk per line",
			query: []string{"stream", "cursor", "max", "follow"}, resp: api.LogChunk{}, stream: "application/x-ndjson"},
		{pattern: "POST /v1/processes/{id}/stop", handler: s.stop, summary: "Stop a process gracefully (SIGTERM, then SIGKILL after the grace)", req: api.StopRequest{}, resp: api.StopResponse{}},
		{pattern: MCPPath, mount: s.mcpHandler, methods: []string{"post", "get", "delete"}, summary: "Streamable-HTTP MCP endpoint (on the socket, a POST with Upgrade: capsule-host-mcp-stdio hands a stdin and stdout over by SCM_RIGHTS: client.HandOffStdio)", external: "https://modelcontextprotocol.io/specification/2025-06-18/basic/transports#streamable-http"},
	}
}

var (
	openapiOnce sync.Once
	openapiDoc  []byte
)

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	openapiOnce.Do(func() {
		b, err := json.MarshalIndent(OpenAPI(s.routes()), "", "  ")
		if err != nil {
			panic(err) // maps and strings only: cannot fail
		}
		openapiDoc = b
	})
	w.Header().Set("Content-Type", "application/json")
	w.Write(openapiDoc)
}

// OpenAPI is the OpenAPI 3.1 document of routes.
func OpenAPI(routes []route) map[string]any {
	schemas := map[string]any{}
	paths := map[string]any{}
	for _, rt := range routes {
		methods, path := rt.methods, rt.pattern
		if m, p, ok := strings.Cut(rt.pattern, " "); ok {
			methods, path = []string{strings.ToLower(m)}, p
		}
		item, _ := paths[path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[path] = item
		}
		for _, m := range methods {
			item[m] = operation(rt, path, schemas)
		}
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "capsule-host daemon API", "version": "1",
			"description": "HTTP/JSON over a unix socket (mode 0600: the operator) or a loopback TCP listener with bearer tokens (scoped to the token's principal). Every error is an ErrorResponse with a stable code."},
		"paths":      paths,
		"components": map[string]any{"schemas": schemas, "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
}

func operation(rt route, path string, schemas map[string]any) map[string]any {
	op := map[string]any{"summary": rt.summary}
	var params []any
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") {
			params = append(params, map[string]any{"name": strings.Trim(seg, "{}"), "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
	}
	for _, q := range rt.query {
		params = append(params, map[string]any{"name": q, "in": "query", "schema": map[string]any{"type": "string"}})
	}
	if params != nil {
		op["parameters"] = params
	}
	if rt.req != nil {
		op["requestBody"] = map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(rt.req), schemas)}}}
	}
	ok := map[string]any{"description": "OK"}
	switch {
	case rt.external != "":
		ok["description"] = "See " + rt.external
		op["externalDocs"] = map[string]any{"url": rt.external}
	case rt.resp != nil:
		content := map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(rt.resp), schemas)}}
		if rt.stream != "" {
			// One JSON document per line, each of the schema.
			content[rt.stream] = map[string]any{"schema": schemaOf(reflect.TypeOf(rt.resp), schemas), "x-json-lines": true}
		}
		ok["content"] = content
	default: // the document itself
		ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}
	}
	op["responses"] = map[string]any{
		"200":     ok,
		"default": map[string]any{"description": "An error", "content": map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(api.ErrorResponse{}), schemas)}}},
	}
	return op
}

var rawJSON = reflect.TypeOf(json.RawMessage(nil))

// schemaOf is the JSON Schema of t as encoding/json writes it; a named
// struct becomes a component (with additionalProperties false, so a field
// the document lacks fails validation).
func schemaOf(t reflect.Type, schemas map[string]any) map[string]any {
	if t == rawJSON {
		return map[string]any{} // any JSON value
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem(), schemas)
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), schemas)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), schemas)}
	case reflect.Struct:
		name := t.Name()
		if _, done := schemas[name]; !done {
			schemas[name] = map[string]any{} // placeholder for recursion
			schemas[name] = structSchema(t, schemas)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{}
}

func structSchema(t reflect.Type, schemas map[string]any) map[string]any {
	props := map[string]any{}
	var required []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = schemaOf(f.Type, schemas)
		if !strings.Contains(opts, "omitempty") && f.Type.Kind() != reflect.Pointer {
			required = append(required, name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if required != nil {
		s["required"] = required
	}
	return s
}

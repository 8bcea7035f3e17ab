//go:build !leanclient

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// walk is one real request of the OpenAPI walk.
type walk struct {
	method, path string // the request (path with query)
	body         string
	status       int  // the status it must get
	stream       bool // an NDJSON stream: read a few lines, then hang up
}

// TestOpenAPIMatchesServer walks every route of the document the daemon
// serves at /v1/openapi.json with real requests against a real daemon,
// and fails when a route of the server has no walk here, or when an
// answer carries a field (at any depth) the document does not describe.
// The document is generated from the mux's route table and the client
// package's types, so the walk checks the generation, and the table
// check catches a route added beside the table.
func TestOpenAPIMatchesServer(t *testing.T) {
	d := startDaemon(t, nil)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	defer hc.CloseIdleConnections()
	get := func(w walk) (int, []byte) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, w.method, "http://daemon"+w.path, strings.NewReader(w.body))
		if err != nil {
			t.Fatal(err)
		}
		if w.body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", w.method, w.path, err)
		}
		defer resp.Body.Close()
		if !w.stream {
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		var lines [][]byte
		br := bufio.NewReader(resp.Body)
		for len(lines) < 2 {
			line, err := br.ReadBytes('\n')
			if err != nil {
				break
			}
			lines = append(lines, line)
		}
		return resp.StatusCode, bytes.Join(lines, nil)
	}
	_, raw := get(walk{method: "GET", path: "/v1/openapi.json"})
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil || doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi.json: %v\n%s", err, raw)
	}

	id := d.spawnTicker(t, "alice")
	walks := map[string][]walk{
		"get /v1/health":               {{method: "GET", path: "/v1/health", status: 200}},
		"get /v1/openapi.json":         {{method: "GET", path: "/v1/openapi.json", status: 200}},
		"get /v1/cluster/nodes":        {{method: "GET", path: "/v1/cluster/nodes", status: 404}}, // not in cluster mode (TestClusterThreeDaemons serves it)
		"get /v1/capsules":             {{method: "GET", path: "/v1/capsules", status: 200}},
		"get /v1/capsules/{name}":      {{method: "GET", path: "/v1/capsules/testcap", status: 200}, {method: "GET", path: "/v1/capsules/nope", status: 404}},
		"post /v1/reload":              {{method: "POST", path: "/v1/reload", body: `{}`, status: 200}},
		"post /v1/call":                {{method: "POST", path: "/v1/call", body: `{"capsule":"testcap","tool":"echo","input":{"a":1},"principal":"alice"}`, status: 200}, {method: "POST", path: "/v1/call", body: `{"capsule":"testcap","tool":"nope"}`, status: 404}},
		"get /v1/processes":            {{method: "GET", path: "/v1/processes?capsule=testcap&principal=alice", status: 200}},
		"get /v1/processes/{id}":       {{method: "GET", path: "/v1/processes/" + id, status: 200}},
		"get /v1/processes/{id}/logs":  {{method: "GET", path: "/v1/processes/" + id + "/logs?stream=stdout&max=64", status: 200}, {method: "GET", path: "/v1/processes/" + id + "/logs?follow=1", status: 200, stream: true}},
		"post /v1/processes/{id}/stop": {{method: "POST", path: "/v1/processes/" + id + "/stop", body: `{"grace_ms":1000}`, status: 200}},
		// The terminal endpoints (walked in op order: delete, get, then
		// the posts; the ticker is a pipe process, TestTerminalVerbs
		// drives a terminal). wait-for runs after stop: exit fires.
		"delete /v1/processes/{id}":        {{method: "DELETE", path: "/v1/processes/" + id, status: 400}}, // running
		"get /v1/processes/{id}/screen":    {{method: "GET", path: "/v1/processes/" + id + "/screen", status: 400}},
		"post /v1/processes/{id}/input":    {{method: "POST", path: "/v1/processes/" + id + "/input", body: `{"data":"aGk="}`, status: 409}},
		"post /v1/processes/{id}/resize":   {{method: "POST", path: "/v1/processes/" + id + "/resize", body: `{"rows":10,"cols":10}`, status: 400}},
		"post /v1/processes/{id}/signal":   {{method: "POST", path: "/v1/processes/" + id + "/signal", body: `{"signal":"cont"}`, status: 200}},
		"post /v1/processes/{id}/wait-for": {{method: "POST", path: "/v1/processes/" + id + "/wait-for", body: `{"exit":true,"timeout_ms":20000}`, status: 200}},
		"post /mcp":                        {{method: "POST", path: "/mcp?principal=alice", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, status: 200}},
		"get /mcp":                         nil, // the same endpoint as post /mcp: its protocol is MCP's
		"delete /mcp":                      nil,
	}
	paths, _ := doc["paths"].(map[string]any)
	var ops []string
	for p, item := range paths {
		for m := range item.(map[string]any) {
			ops = append(ops, m+" "+p)
		}
	}
	sort.Strings(ops)
	for _, op := range ops {
		ws, ok := walks[op]
		if !ok {
			t.Errorf("the document has %s, which this walk does not request: add it to walks", op)
			continue
		}
		delete(walks, op)
		method, p, _ := strings.Cut(op, " ")
		opDoc := paths[p].(map[string]any)[method].(map[string]any)
		for _, w := range ws {
			status, body := get(w)
			if status != w.status {
				t.Errorf("%s %s: status %d, want %d: %s", w.method, w.path, status, w.status, body)
				continue
			}
			if op == "post /mcp" {
				continue // MCP's own protocol (externalDocs)
			}
			schema := responseSchema(t, opDoc, status)
			for _, line := range splitDocs(body, w.stream) {
				var v any
				if err := json.Unmarshal(line, &v); err != nil {
					t.Errorf("%s %s: not JSON: %s", w.method, w.path, line)
					continue
				}
				for _, miss := range undocumented(doc, schema, v, "") {
					t.Errorf("%s %s: field %s is not in the OpenAPI document", w.method, w.path, miss)
				}
			}
		}
	}
	for op := range walks {
		t.Errorf("walk %s names no operation of the document (a route was removed or renamed)", op)
	}
	// A route served beside the table is not in the document.
	for _, probe := range []string{"/v1/", "/v1/healthz", "/v1/capsules/testcap/tools"} {
		if status, _ := get(walk{method: "GET", path: probe}); status != http.StatusNotFound {
			t.Errorf("GET %s: status %d: a route the document does not describe", probe, status)
		}
	}
}

// responseSchema is the schema of an operation's answer with status.
func responseSchema(t *testing.T, op map[string]any, status int) map[string]any {
	t.Helper()
	resps, _ := op["responses"].(map[string]any)
	r, ok := resps[fmt.Sprint(status)].(map[string]any)
	if !ok {
		r, _ = resps["default"].(map[string]any)
	}
	content, _ := r["content"].(map[string]any)
	mt, _ := content["application/json"].(map[string]any)
	s, _ := mt["schema"].(map[string]any)
	if s == nil {
		t.Fatalf("no application/json schema for status %d in %v", status, op)
	}
	return s
}

func splitDocs(body []byte, stream bool) [][]byte {
	if !stream {
		return [][]byte{body}
	}
	var out [][]byte
	for _, l := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// undocumented lists the object fields of v, as JSON paths, that schema
// (resolving $ref in doc) does not describe.
func undocumented(doc map[string]any, schema map[string]any, v any, at string) []string {
	for {
		ref, ok := schema["$ref"].(string)
		if !ok {
			break
		}
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		schema, _ = doc["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any)
	}
	var out []string
	switch x := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for k, fv := range x {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if schema["additionalProperties"] == false || props != nil {
					out = append(out, at+"."+k)
				}
				continue
			}
			out = append(out, undocumented(doc, ps, fv, at+"."+k)...)
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		for i, e := range x {
			if items != nil {
				out = append(out, undocumented(doc, items, e, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	}
	return out
}

// Package sdk is the Go guest SDK of capsule-host: a capsule registers its
// tools in init and the SDK exports capsule:guest/tool@1.0.0 (describe,
// call, their cabi_post_* hooks) and cabi_realloc.
//
// A capsule is a package main built as a WASI preview1 reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-buildid= -o x.wasm .
//
// Its main is empty: the host runs _initialize (package init), then calls
// tools. Tools must keep no state between calls in memory: each call may
// land on another pooled instance. Process bindings are in sdk/process
// (capsule:process@1.1.0) and sdk/process/ephemeral (1.0.0).
package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/wire"
)

// Tool is one tool of the capsule.
type Tool struct {
	// Name is unique within the capsule: [a-z0-9_]{1,64}.
	Name        string
	Description string
	// InputSchema is JSON Schema (draft 2020-12) text for the input object.
	InputSchema string
	// Handler gets the call's input (valid JSON, checked by the SDK). Its
	// result is marshalled to JSON for the agent (a json.RawMessage is
	// checked and passed on, a ValidJSON passed on); an error becomes the
	// call's err string. A panic is recovered into an err result.
	Handler func(input json.RawMessage) (any, error)
}

// ValidJSON is a handler result that is JSON text already, passed on as
// is. A json.RawMessage result is scanned with json.Valid first; this one
// is not, so return it only from an encoder the capsule's tests prove
// writes valid JSON (the shell capsule's list_processes encoder is checked
// byte for byte against encoding/json and fuzzed). In the guest that scan
// cost more than all the rest of a 500-process list (RFC.md §18). The
// daemon checks every output anyway and passes text that is not JSON on
// as a JSON string, so an encoder's bug shows instead of breaking a client.
type ValidJSON []byte

// panicLog receives a panicking handler's stack (the host log).
var panicLog io.Writer = os.Stderr

var (
	tools  []Tool
	byName = map[string]int{}
	nameRE = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

// Register adds a tool; call it from init. An invalid or duplicate tool
// panics, which fails the capsule's load with that message: it is a bug
// in the capsule, not a runtime condition.
func Register(t Tool) {
	if !nameRE.MatchString(t.Name) {
		panic(fmt.Sprintf("sdk.Register: tool name %q is not [a-z0-9_]{1,64}", t.Name))
	}
	if _, dup := byName[t.Name]; dup {
		panic(fmt.Sprintf("sdk.Register: tool %q registered twice", t.Name))
	}
	if t.Handler == nil {
		panic(fmt.Sprintf("sdk.Register: tool %q has no handler", t.Name))
	}
	if t.InputSchema == "" {
		t.InputSchema = `{"type":"object"}`
	}
	if !json.Valid([]byte(t.InputSchema)) {
		panic(fmt.Sprintf("sdk.Register: tool %q: input schema is not valid JSON", t.Name))
	}
	byName[t.Name] = len(tools)
	tools = append(tools, t)
}

// Tools returns the registered tools in registration order.
func Tools() []Tool { return append([]Tool(nil), tools...) }

// Call runs one tool call the way the export does: it returns the JSON
// result, or the err message. It never panics.
func Call(name, input string) (ok string, errMsg string, isErr bool) {
	i, found := byName[name]
	if !found {
		names := make([]string, 0, len(tools))
		for _, t := range tools {
			names = append(names, t.Name)
		}
		sort.Strings(names)
		return "", fmt.Sprintf("unknown tool %q (this capsule has: %s)", name, strings.Join(names, ", ")), true
	}
	if !json.Valid([]byte(input)) {
		return "", fmt.Sprintf("invalid input for %s: not valid JSON (%d bytes)", name, len(input)), true
	}
	out, err := run(tools[i], json.RawMessage(input))
	if err != nil {
		return "", errString(err), true
	}
	return out, "", false
}

// Error is a tool error with a typed code, which the daemon passes
// through to its clients (the HTTP API's error tool_code, the CLI, MCP):
// a client can then tell, say, "no-such-process" from a failure. Code is
// kebab-case, [a-z][a-z0-9-]{0,63}; use the contract's error-code names
// (no-such-process, quota, capability-denied, ...) where one fits.
//
// The guest contract's convention (capsule:guest/tool's err string): an
// err string that is exactly the JSON object {"code": CODE, "message":
// TEXT} carries CODE; any other err string is plain text. Call writes it
// for an *Error and for every process error (*process.Error, whose code
// is the contract's), anywhere in a returned error's chain.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// errString is a handler's error as the call's err string: the typed
// convention for a coded error, else its text.
func errString(err error) string {
	code := ""
	var se *Error
	var pe *wire.Error
	switch {
	case errors.As(err, &se):
		code = se.Code
	case errors.As(err, &pe):
		code = pe.Code.String()
	}
	if code == "" {
		return err.Error()
	}
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, err.Error()})
	return string(b)
}

func run(t Tool, input json.RawMessage) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			// The stack goes to stderr (the host log); the agent gets a line.
			fmt.Fprintf(panicLog, "tool %s panicked: %v\n%s", t.Name, r, debug.Stack())
			err = fmt.Errorf("tool %s failed: internal error (panic: %v)", t.Name, r)
		}
	}()
	v, err := t.Handler(input)
	if err != nil {
		return "", err
	}
	if enc, ok := v.(ValidJSON); ok {
		return string(enc), nil
	}
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return "", fmt.Errorf("tool %s returned invalid JSON", t.Name)
		}
		return string(raw), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("tool %s: cannot encode its result as JSON: %v", t.Name, err)
	}
	return string(b), nil
}

// Validator is implemented by input types that check themselves after
// decoding (required fields, ranges).
type Validator interface{ Validate() error }

// Decode strictly decodes a tool's input into v: the input must be one
// JSON object, unknown fields are refused, and v.Validate runs if v
// implements Validator. Errors name the offending field.
func Decode(input json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(input))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("invalid input: %s", describeJSONError(err))
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("invalid input: trailing data after the JSON object")
	}
	if val, ok := v.(Validator); ok {
		if err := val.Validate(); err != nil {
			return fmt.Errorf("invalid input: %w", err)
		}
	}
	return nil
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("expected %s, got JSON %s", te.Type, te.Value)
	}
	if s := err.Error(); strings.HasPrefix(s, "json: unknown field ") {
		return "unknown field " + strings.TrimPrefix(s, "json: unknown field ")
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// Handle adapts a typed handler: the input is decoded with Decode.
func Handle[T any](h func(in T) (any, error)) func(json.RawMessage) (any, error) {
	return func(input json.RawMessage) (any, error) {
		var in T
		if err := Decode(input, &in); err != nil {
			return nil, err
		}
		return h(in)
	}
}

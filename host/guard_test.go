package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host"
)

// The guard fixture's tools check nothing themselves: what these tests
// see refused, the host refused.
const (
	guardWasm     = "testdata/guard/guard.wasm"
	badSchemaWasm = "testdata/badschema/badschema.wasm"
)

// A call's input is validated against the tool's declared JSON Schema
// before the guest runs: {"port": 80} does not pass "minimum": 1024, and
// the error names the path and the rule.
func TestInputValidatedAgainstSchema(t *testing.T) {
	e := newHost(t, nil)
	ctx := context.Background()
	if _, err := e.h.Load(ctx, capsuleDir(t, "guard", guardWasm, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.h.Call(ctx, "guard", "port", `{"port":8080}`); err != nil {
		t.Fatalf("valid input: %v", err)
	}
	for _, tc := range []struct{ in, path, rule string }{
		{`{"port":80}`, "/port", "minimum"},
		{`{"port":"8080"}`, "/port", "type"},
		{`{}`, "", "required"},
		{`[1]`, "", "type"},
		{`{"port":8080} trailing`, "", "json"},
	} {
		_, err := e.h.Call(ctx, "guard", "port", tc.in)
		var ie *host.InvalidInputError
		if !errors.As(err, &ie) || !errors.Is(err, host.ErrInvalidInput) || ie.Path != tc.path || ie.Rule != tc.rule || ie.Tool != "port" {
			t.Errorf("%s: %v; want invalid input at %q, rule %q", tc.in, err, tc.path, tc.rule)
		}
	}
	_, err := e.h.Call(ctx, "guard", "port", `{"port":80}`)
	if msg := err.Error(); !strings.Contains(msg, "/port") || !strings.Contains(msg, "minimum") || !strings.Contains(msg, "got 80") {
		t.Errorf("message %q: want the path, the rule and the bound", msg)
	}
}

// A schema that does not compile refuses the capsule at load, naming the
// tool and what is wrong; nothing is left loaded.
func TestUncompilableSchemaRefusesLoad(t *testing.T) {
	e := newHost(t, nil)
	_, err := e.h.Load(context.Background(), capsuleDir(t, "badschema", badSchemaWasm, ""))
	if !errors.Is(err, host.ErrDescribe) || !strings.Contains(err.Error(), `tool "bad"`) || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("load: %v; want a describe error naming tool \"bad\" and its schema's fault", err)
	}
	if _, ok := e.h.Capsule("badschema"); ok {
		t.Fatal("the capsule was loaded anyway")
	}
}

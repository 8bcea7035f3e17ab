package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tool's schema is self-contained: a $ref to a file or a URL is refused
// at compile time, so a guest cannot make the host read its files (the
// validator's default loader reads file:// URLs) or reach the network;
// the built-in metaschemas still resolve.
func TestSchemaRefsAreNotLoaded(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`{"$ref":"file://` + secret + `"}`,
		`{"properties":{"a":{"$ref":"https://example.invalid/s.json"}}}`,
		`{"$schema":"file://` + secret + `"}`,
	} {
		if _, err := compileSchema("t", s); err == nil || !strings.Contains(err.Error(), errNoLoad.Error()) {
			t.Errorf("%s: %v; want refused as external", s, err)
		}
	}
	for _, s := range []string{
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`,
		`{"$defs":{"p":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/p"}}}`,
		`true`,
	} {
		if _, err := compileSchema("t", s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// The error names the JSON path and the keyword; anyOf is reported as
// itself, not as one of its branches.
func TestValidateInputNamesPathAndRule(t *testing.T) {
	s, err := compileSchema("t", `{"type":"object","additionalProperties":false,"required":["a"],"properties":{
		"a":{"type":"array","items":{"type":"object","properties":{"n/m":{"type":"integer","maximum":3}}}},
		"b":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, path, rule string }{
		{`{"a":[{"n/m":1},{"n/m":4}]}`, "/a/1/n~1m", "maximum"},
		{`{}`, "", "required"},
		{`{"a":[],"c":1}`, "", "additionalProperties"},
		{`{"a":[],"b":true}`, "/b", "anyOf"},
		{`{"a":"x"}`, "/a", "type"},
		{`{"a":[]} {}`, "", "json"},
		{`{"a":`, "", "json"},
	} {
		err := validateInput("c", "t", s, tc.in)
		var ie *InvalidInputError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInput) || ie.Path != tc.path || ie.Rule != tc.rule {
			t.Errorf("%s: %v (%+v); want path %q rule %q", tc.in, err, ie, tc.path, tc.rule)
		}
	}
	if err := validateInput("c", "t", s, `{"a":[{"n/m":3}],"b":"x"}`); err != nil {
		t.Errorf("valid input refused: %v", err)
	}
	if err := validateInput("c", "t", nil, `not json`); err != nil {
		t.Errorf("no schema declared: %v", err)
	}
}

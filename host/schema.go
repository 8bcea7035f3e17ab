package host

import (
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Tool input validation: the host checks every call's input against the
// JSON Schema the tool declared in describe before any guest code runs,
// so a tool's declared contract ({"port": {"minimum": 1024}}) holds even
// for a guest that forgets to check, and a caller learns the path and the
// rule it broke.

// schemaBase is the URL a tool's schema is registered under: it names
// nothing real, and every other URL a schema refers to is refused.
const schemaBase = "capsule-host:///tools/"

// errNoLoad refuses every schema a tool's schema refers to by URL: a
// guest's $ref must not make the host read its files ("file:///etc/…",
// the library's default loader) or reach the network. The JSON Schema
// metaschemas are built into the library and still resolve.
var errNoLoad = errors.New("external schema references are not allowed: a tool's schema must be self-contained")

type noLoader struct{}

func (noLoader) Load(string) (any, error) { return nil, errNoLoad }

// compileSchemas compiles each tool's declared input schema once, at load
// (draft 2020-12 unless the schema's $schema says otherwise). A tool with
// an empty schema declared none and gets no validation; a schema that does
// not compile refuses the capsule, naming the tool.
func compileSchemas(capsule string, tools []ToolSpec) (map[string]*jsonschema.Schema, error) {
	out := make(map[string]*jsonschema.Schema, len(tools))
	for _, t := range tools {
		if t.InputSchema == "" {
			continue
		}
		s, err := compileSchema(t.Name, t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("%w: capsule %q: tool %q: input schema does not compile: %w", ErrDescribe, capsule, t.Name, err)
		}
		out[t.Name] = s
	}
	return out, nil
}

func compileSchema(name, text string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	url := schemaBase + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// validateInput checks input against tool's compiled schema (nil: none
// declared). The error is an *InvalidInputError naming the JSON path
// and the rule.
func validateInput(capsule, tool string, s *jsonschema.Schema, input string) error {
	if s == nil {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(input))
	if err != nil {
		return &InvalidInputError{Capsule: capsule, Tool: tool, Rule: "json", Detail: "input is not a JSON value: " + err.Error()}
	}
	err = s.Validate(v)
	var ve *jsonschema.ValidationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ve):
		leaf := firstFailure(ve)
		return &InvalidInputError{Capsule: capsule, Tool: tool, Path: jsonPointer(leaf.InstanceLocation),
			Rule: rule(leaf), Detail: leaf.ErrorKind.LocalizedString(printer)}
	}
	return &InvalidInputError{Capsule: capsule, Tool: tool, Rule: "schema", Detail: err.Error()}
}

var printer = message.NewPrinter(language.English)

// firstFailure descends the validator's error tree to the first concrete
// failure: through the wrappers (the schema itself, $ref, allOf and
// keyword groups) but not into anyOf/oneOf branches, where "the value
// matched none of them" is the rule that failed, not one branch's.
func firstFailure(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(e.Causes) > 0 {
		switch e.ErrorKind.(type) {
		case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf:
			e = e.Causes[0]
		default:
			return e
		}
	}
	return e
}

// rule names the keyword that failed: "minimum", "required", "type".
func rule(e *jsonschema.ValidationError) string {
	kp := e.ErrorKind.KeywordPath()
	if len(kp) == 0 {
		return "schema"
	}
	return kp[0]
}

// jsonPointer renders an instance location as an RFC 6901 JSON Pointer
// ("" is the whole input).
func jsonPointer(loc []string) string {
	var b strings.Builder
	for _, s := range loc {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(s))
	}
	return b.String()
}

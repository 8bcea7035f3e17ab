// Package manifest parses Capsule.toml strictly.
//
// Why strict: a manifest grants capabilities. A misspelt key
// ("alow_persistent") that were silently ignored would change what a capsule
// may do without anyone noticing, so an unknown key, a wrong type or a
// missing field is an error naming the file, the line and the key.
//
// The file is decoded by BurntSushi/toml into a generic tree (syntax errors
// carry their position) and then checked against the schema below by hand,
// so every error has one shape: "<file>:<line>: <key>: <what is wrong>".
package manifest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/host/internal/stricttoml"
)

// FileName is the manifest's name inside a capsule directory.
const FileName = "Capsule.toml"

// ErrInvalid is the class of every manifest error.
var ErrInvalid = errors.New("invalid capsule manifest")

// Error is one problem in a manifest. errors.Is(err, ErrInvalid) holds.
type Error struct {
	File string
	Line int    // 0 when the key is absent (a missing field names its table's line)
	Key  string // dotted: "limits.max_concurrent", `imports."capsule:process"`
	Msg  string
}

func (e *Error) Error() string {
	pos := e.File
	if e.Line > 0 {
		pos = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return pos + ": " + e.Msg
	}
	return pos + ": " + e.Key + ": " + e.Msg
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Manifest is a parsed, validated Capsule.toml. Zero values in Limits mean
// "not set" (the host's value applies).
type Manifest struct {
	// File is the manifest's path; Dir the capsule directory.
	File, Dir string

	Name    string
	Version string
	// Module is the cleaned, relative path of the wasm module.
	Module string
	// SHA256 is the lowercase hex digest the module must have.
	SHA256      string
	Description string

	// Imports maps a WIT package ("capsule:process") to the version the
	// capsule was built against ("1.1" or "1.1.0").
	Imports map[string]string

	Capabilities Capabilities
	Limits       Limits
	Pool         Pool

	lines stricttoml.Lines
}

// Capabilities is the [capabilities] table.
type Capabilities struct {
	// Exec lists the executables the capsule may start, as written.
	Exec            []string
	AllowPersistent bool
	Backend         string // "local" (default), "bwrap", "oci"
	Network         bool
	Profile         string // OCI launch profile
}

// Limits is the [limits] table; 0 means unset.
type Limits struct {
	MaxConcurrent  int
	MaxRetained    int
	MaxEntries     int
	MaxMemoryBytes int64
	MaxCPU         time.Duration // from max_cpu_ms
	MaxPids        int
	MaxOpenFiles   int
	// MaxOutputRate is max_output_bytes_per_sec: each output stream's
	// capture rate (it can only lower the host's; above, it is clamped).
	MaxOutputRate int64
}

// Pool is the [pool] table with defaults applied.
type Pool struct {
	MinIdle int
	Max     int
	IdleTTL time.Duration
	// MemoryBytes caps each instance's linear memory (0: the host's
	// ceiling, which it may only lower; a multiple of 64 KiB).
	MemoryBytes int64
	// MaxPerPrincipal bounds the instances one principal holds or waits
	// for at once (0: half of Max, rounded up), so one principal's flood
	// cannot starve another's calls (host/fair.go).
	MaxPerPrincipal int
}

// Pool defaults: one warm instance, growth to 8, idle instances beyond
// min_idle evicted after 5 minutes.
const (
	DefaultMinIdle = 1
	DefaultMax     = 8
	DefaultIdleTTL = 5 * time.Minute
	// MaxPoolSize bounds [pool] max: each wazero instance of a Go guest
	// holds a few MB of linear memory.
	MaxPoolSize = 1024

	wasmPage       = 64 << 10
	maxMemoryBytes = 4<<30 - wasmPage // 65535 pages: sizes are 32-bit
)

// The patterns are compiled on first use, not in package init: every
// command of the full binary links this package, and compiling them at
// start-up cost 1.3-2 ms (GODEBUG=inittrace=1).
var (
	nameRE    = lazyRE(`^[a-z0-9][a-z0-9-]{0,62}$`)
	semverRE  = lazyRE(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	sha256RE  = lazyRE(`^[0-9a-f]{64}$`)
	witPkgRE  = lazyRE(`^[a-z][a-z0-9-]*:[a-z][a-z0-9-]*$`)
	importVer = lazyRE(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?$`)
)

// lazyRE returns a function compiling expr once, at its first call.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// Load reads and validates dir/Capsule.toml.
func Load(dir string) (*Manifest, error) {
	file := filepath.Join(dir, FileName)
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Parse(file, data)
}

// Parse validates the manifest text; file names it in errors and locates
// the capsule directory.
func Parse(file string, data []byte) (*Manifest, error) {
	m, _, err := parse(file, data, false)
	return m, err
}

// parse is Parse, also returning the decoded tree; unpinned relaxes the
// pin alone (see ParseUnpinned).
func parse(file string, data []byte, unpinned bool) (*Manifest, map[string]any, error) {
	tree, lines, prob := stricttoml.DecodeTree(string(data))
	if prob != nil {
		if prob.Syntax {
			// LastKey is the last key parsed, often not the faulty one:
			// the position is what locates a syntax error.
			return nil, nil, &Error{File: file, Line: prob.Line, Msg: "TOML syntax: " + prob.Msg}
		}
		return nil, nil, &Error{File: file, Line: prob.Line, Key: prob.Key, Msg: "TOML: " + prob.Msg}
	}
	p := &parser{file: file, lines: lines, unpinned: unpinned}
	m := &Manifest{File: file, Dir: filepath.Dir(file), lines: lines}
	if err := p.manifest(tree, m); err != nil {
		return nil, nil, err
	}
	return m, tree, nil
}

// Line returns the line of a dotted key ("limits.max_pids"), or of its
// table when the key is absent, or 0.
func (m *Manifest) Line(key string) int { return m.lines.Find(key) }

// Errorf builds an *Error about key, positioned in this manifest, for
// checks made outside this package (host ceilings, backends).
func (m *Manifest) Errorf(key, format string, args ...any) error {
	return &Error{File: m.File, Line: m.Line(key), Key: key, Msg: fmt.Sprintf(format, args...)}
}

// ModulePath resolves the module inside the capsule directory, refusing a
// symlink that leads outside it.
func (m *Manifest) ModulePath() (string, error) {
	dir, err := filepath.EvalSymlinks(m.Dir)
	if err != nil {
		return "", m.Errorf("capsule.module", "capsule directory: %v", err)
	}
	p, err := filepath.EvalSymlinks(filepath.Join(dir, m.Module))
	if err != nil {
		return "", m.Errorf("capsule.module", "%v", err)
	}
	if !within(dir, p) {
		return "", m.Errorf("capsule.module", "%q resolves to %q, outside the capsule directory", m.Module, p)
	}
	return p, nil
}

func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

type parser struct {
	file  string
	lines stricttoml.Lines
	// unpinned: [capsule] sha256 may be absent or any string.
	unpinned bool
}

func (p *parser) errf(key, format string, args ...any) error {
	return &Error{File: p.file, Line: p.lines.Find(key), Key: key, Msg: fmt.Sprintf(format, args...)}
}

// field is one schema entry: how to check a value found under a key.
type field struct {
	required bool
	set      func(key string, v any) error
}

// table checks tbl against the schema: unknown keys, missing required
// keys, then each value. Keys are visited in sorted order so the first
// error reported is deterministic.
func (p *parser) table(prefix string, tbl map[string]any, schema map[string]field) error {
	keys := make([]string, 0, len(tbl))
	for k := range tbl {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return p.lineOf(prefix, keys[i]) < p.lineOf(prefix, keys[j]) || (p.lineOf(prefix, keys[i]) == p.lineOf(prefix, keys[j]) && keys[i] < keys[j])
	})
	for _, k := range keys {
		if _, ok := schema[k]; !ok {
			return p.errf(join(prefix, k), "unknown key (known: %s)", known(schema))
		}
	}
	req := make([]string, 0, len(schema))
	for k, f := range schema {
		if _, ok := tbl[k]; f.required && !ok {
			req = append(req, k)
		}
	}
	sort.Strings(req)
	if len(req) > 0 {
		return p.errf(join(prefix, req[0]), "missing required key in [%s]", prefix)
	}
	for _, k := range keys {
		if err := schema[k].set(join(prefix, k), tbl[k]); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) lineOf(prefix, k string) int { return p.lines[join(prefix, k)] }

// join is the canonical dotted key of k in table prefix, the form the
// scanned lines use: `imports."capsule:process"`.
func join(prefix, k string) string { return stricttoml.Join(prefix, k) }

func known(schema map[string]field) string {
	ks := make([]string, 0, len(schema))
	for k := range schema {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case []any, []map[string]any:
		return "array"
	case map[string]any:
		return "table"
	case time.Time:
		return "datetime"
	}
	return fmt.Sprintf("%T", v)
}

func (p *parser) str(dst *string, check func(key, s string) error) func(string, any) error {
	return func(key string, v any) error {
		s, ok := v.(string)
		if !ok {
			return p.errf(key, "expected a string, got %s", typeName(v))
		}
		if check != nil {
			if err := check(key, s); err != nil {
				return err
			}
		}
		*dst = s
		return nil
	}
}

func (p *parser) boolean(dst *bool) func(string, any) error {
	return func(key string, v any) error {
		b, ok := v.(bool)
		if !ok {
			return p.errf(key, "expected a boolean, got %s", typeName(v))
		}
		*dst = b
		return nil
	}
}

func (p *parser) integer(min, max int64, set func(int64)) func(string, any) error {
	return func(key string, v any) error {
		n, ok := v.(int64)
		if !ok {
			return p.errf(key, "expected an integer, got %s", typeName(v))
		}
		if n < min || n > max {
			return p.errf(key, "%d is out of range [%d, %d]", n, min, max)
		}
		set(n)
		return nil
	}
}

func (p *parser) table2(key string, v any, schema map[string]field) error {
	t, ok := v.(map[string]any)
	if !ok {
		return p.errf(key, "expected a table, got %s", typeName(v))
	}
	return p.table(key, t, schema)
}

// manifest decodes the whole tree into m: defaults first, then one
// schema per table, then the checks that span tables.
func (p *parser) manifest(tree map[string]any, m *Manifest) error {
	m.Imports = map[string]string{}
	m.Capabilities.Backend = "local"
	m.Pool = Pool{MinIdle: DefaultMinIdle, Max: DefaultMax, IdleTTL: DefaultIdleTTL}
	maxPool := false // pool.max given: min_idle may not raise it
	capsule, caps, limits, pool := p.capsuleSchema(m), p.capsSchema(m), p.limitsSchema(m), p.poolSchema(m, &maxPool)
	top := map[string]field{
		"capsule":      {true, func(key string, v any) error { return p.table2(key, v, capsule) }},
		"imports":      {false, p.imports(m)},
		"capabilities": {false, func(key string, v any) error { return p.table2(key, v, caps) }},
		"limits":       {false, func(key string, v any) error { return p.table2(key, v, limits) }},
		"pool":         {false, func(key string, v any) error { return p.table2(key, v, pool) }},
	}
	if err := p.table("", tree, top); err != nil {
		return err
	}
	if m.Pool.MinIdle > m.Pool.Max {
		if !maxPool && m.Pool.MinIdle <= MaxPoolSize {
			m.Pool.Max = m.Pool.MinIdle
		} else {
			return p.errf("pool.min_idle", "%d exceeds pool.max %d", m.Pool.MinIdle, m.Pool.Max)
		}
	}
	if m.Pool.MaxPerPrincipal > m.Pool.Max {
		return p.errf("pool.max_per_principal", "%d exceeds pool.max %d", m.Pool.MaxPerPrincipal, m.Pool.Max)
	}
	if m.Capabilities.Profile != "" && m.Capabilities.Backend != "oci" {
		return p.errf("capabilities.profile", "a launch profile needs backend = \"oci\" (backend is %q)", m.Capabilities.Backend)
	}
	return nil
}

// capsuleSchema is [capsule]: name, version, module, sha256, description.
func (p *parser) capsuleSchema(m *Manifest) map[string]field {
	return map[string]field{
		"name": {true, p.str(&m.Name, func(key, s string) error {
			if !nameRE().MatchString(s) {
				return p.errf(key, "%q is not a valid capsule name ([a-z0-9][a-z0-9-]{0,62})", s)
			}
			return nil
		})},
		"version": {true, p.str(&m.Version, func(key, s string) error {
			if !semverRE().MatchString(s) {
				return p.errf(key, "%q is not a semantic version (MAJOR.MINOR.PATCH)", s)
			}
			return nil
		})},
		"module": {true, p.str(&m.Module, func(key, s string) error {
			if s == "" || filepath.IsAbs(s) || strings.HasPrefix(s, "/") {
				return p.errf(key, "%q must be a relative path inside the capsule directory", s)
			}
			c := filepath.Clean(s)
			if c == "." || c == ".." || strings.HasPrefix(c, "../") {
				return p.errf(key, "%q leaves the capsule directory", s)
			}
			return nil
		})},
		"sha256": {!p.unpinned, p.str(&m.SHA256, func(key, s string) error {
			if !p.unpinned && !sha256RE().MatchString(s) {
				return p.errf(key, "%q is not 64 lowercase hex digits", s)
			}
			return nil
		})},
		"description": {false, p.str(&m.Description, nil)},
	}
}

// imports is [imports]: WIT package name = contract version, checked in
// name order so the first problem reported does not depend on map order.
func (p *parser) imports(m *Manifest) func(string, any) error {
	return func(key string, v any) error {
		t, ok := v.(map[string]any)
		if !ok {
			return p.errf(key, "expected a table, got %s", typeName(v))
		}
		names := make([]string, 0, len(t))
		for k := range t {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			kk := join(key, k)
			if !witPkgRE().MatchString(k) {
				return p.errf(kk, "%q is not a WIT package name (namespace:package)", k)
			}
			s, ok := t[k].(string)
			if !ok {
				return p.errf(kk, "expected a version string, got %s", typeName(t[k]))
			}
			if !importVer().MatchString(s) {
				return p.errf(kk, "%q is not a contract version (MAJOR.MINOR or MAJOR.MINOR.PATCH)", s)
			}
			m.Imports[k] = s
		}
		return nil
	}
}

// capsSchema is [capabilities]: exec, allow_persistent, backend,
// network, profile.
func (p *parser) capsSchema(m *Manifest) map[string]field {
	return map[string]field{
		"exec":             {false, p.execList(m)},
		"allow_persistent": {false, p.boolean(&m.Capabilities.AllowPersistent)},
		"backend": {false, p.str(&m.Capabilities.Backend, func(key, s string) error {
			switch s {
			case "local", "bwrap", "oci":
				return nil
			}
			return p.errf(key, "%q is not a backend (local, bwrap, oci)", s)
		})},
		"network": {false, p.boolean(&m.Capabilities.Network)},
		"profile": {false, p.str(&m.Capabilities.Profile, func(key, s string) error {
			if !nameRE().MatchString(s) {
				return p.errf(key, "%q is not a valid profile name", s)
			}
			return nil
		})},
	}
}

// execList is capabilities.exec: distinct bare names or absolute paths.
func (p *parser) execList(m *Manifest) func(string, any) error {
	return func(key string, v any) error {
		arr, ok := v.([]any)
		if !ok {
			return p.errf(key, "expected an array of strings, got %s", typeName(v))
		}
		seen := map[string]bool{}
		for i, e := range arr {
			s, ok := e.(string)
			if !ok {
				return p.errf(key, "element %d: expected a string, got %s", i, typeName(e))
			}
			if s == "" || strings.ContainsRune(s, 0) {
				return p.errf(key, "element %d: empty or NUL-containing executable", i)
			}
			if strings.Contains(s, "/") && !filepath.IsAbs(s) {
				return p.errf(key, "element %d: %q must be a bare name or an absolute path", i, s)
			}
			if seen[s] {
				return p.errf(key, "element %d: %q listed twice", i, s)
			}
			seen[s] = true
			m.Capabilities.Exec = append(m.Capabilities.Exec, s)
		}
		return nil
	}
}

// limitsSchema is [limits], each a bounded positive integer.
func (p *parser) limitsSchema(m *Manifest) map[string]field {
	const big = 1 << 40
	return map[string]field{
		"max_concurrent":           {false, p.integer(1, 1<<20, func(n int64) { m.Limits.MaxConcurrent = int(n) })},
		"max_retained":             {false, p.integer(1, 1<<20, func(n int64) { m.Limits.MaxRetained = int(n) })},
		"max_entries":              {false, p.integer(1, 1<<24, func(n int64) { m.Limits.MaxEntries = int(n) })},
		"max_memory_bytes":         {false, p.integer(1, 1<<62, func(n int64) { m.Limits.MaxMemoryBytes = n })},
		"max_cpu_ms":               {false, p.integer(1, big, func(n int64) { m.Limits.MaxCPU = time.Duration(n) * time.Millisecond })},
		"max_pids":                 {false, p.integer(1, 1<<22, func(n int64) { m.Limits.MaxPids = int(n) })},
		"max_open_files":           {false, p.integer(1, 1<<24, func(n int64) { m.Limits.MaxOpenFiles = int(n) })},
		"max_output_bytes_per_sec": {false, p.integer(1, 1<<40, func(n int64) { m.Limits.MaxOutputRate = n })},
	}
}

// poolSchema is [pool]: min_idle, max, max_per_principal, idle_ttl and
// memory_bytes;
// *maxSet records whether pool.max was given.
func (p *parser) poolSchema(m *Manifest, maxSet *bool) map[string]field {
	return map[string]field{
		"min_idle":          {false, p.integer(0, MaxPoolSize, func(n int64) { m.Pool.MinIdle = int(n) })},
		"max_per_principal": {false, p.integer(1, MaxPoolSize, func(n int64) { m.Pool.MaxPerPrincipal = int(n) })},
		"max": {false, p.integer(1, MaxPoolSize, func(n int64) {
			m.Pool.Max = int(n)
			*maxSet = true
		})},
		"memory_bytes": {false, func(key string, v any) error {
			n, ok := v.(int64)
			if !ok {
				return p.errf(key, "expected an integer, got %s", typeName(v))
			}
			if n < wasmPage || n > maxMemoryBytes || n%wasmPage != 0 {
				return p.errf(key, "%d is not a multiple of %d (the wasm page) in [%d, %d]", n, wasmPage, wasmPage, maxMemoryBytes)
			}
			m.Pool.MemoryBytes = n
			return nil
		}},
		"idle_ttl": {false, func(key string, v any) error {
			s, ok := v.(string)
			if !ok {
				return p.errf(key, "expected a duration string (\"90s\", \"5m\"), got %s", typeName(v))
			}
			d, err := time.ParseDuration(s)
			if err != nil || d < time.Second || d > 24*time.Hour {
				return p.errf(key, "%q is not a duration between 1s and 24h", s)
			}
			m.Pool.IdleTTL = d
			return nil
		}},
	}
}

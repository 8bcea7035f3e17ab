package component

import (
	"errors"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/internal/leb128"
)

// Encoders for hand-built binaries.

func leb(n uint64) []byte { return leb128.AppendUnsigned(nil, n) }

func str(s string) []byte { return append(leb(uint64(len(s))), s...) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func vec(items ...[]byte) []byte { return cat(leb(uint64(len(items))), cat(items...)) }

func sec(id byte, body []byte) []byte { return cat([]byte{id}, leb(uint64(len(body))), body) }

var (
	compHeader = []byte{0, 'a', 's', 'm', 0x0d, 0, 1, 0}
	coreHeader = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
)

func comp(sections ...[]byte) []byte { return cat(compHeader, cat(sections...)) }

// A core module, its instance, an aliased core func "f" and memory
// "memory", and a func type () -> () : what a canon lift needs.
var liftable = [][]byte{
	sec(secCoreModule, coreHeader),
	sec(secCoreInstance, vec(cat([]byte{0x00}, leb(0), vec()))),
	sec(secAlias, vec(cat([]byte{0x00, 0x00, 0x01}, leb(0), str("f")), cat([]byte{0x00, 0x02, 0x01}, leb(0), str("memory")))),
	sec(secType, vec([]byte{0x40, 0x00, 0x01, 0x00})),
}

func liftWith(opts ...byte) []byte {
	canon := sec(secCanon, vec(cat([]byte{0x00, 0x00}, leb(0), leb(uint64(len(opts))), opts, leb(0))))
	return comp(append(append([][]byte{}, liftable...), canon)...)
}

// instanceImport imports an instance named name of an empty instance type.
func instanceImport(name string) []byte {
	return cat(sec(secType, vec([]byte{0x42, 0x00})), sec(secImport, vec(cat([]byte{0x00}, str(name), []byte{0x05}, leb(0)))))
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name      string
		bin       []byte
		kind      error
		section   string
		construct string
		reason    string
	}{
		{name: "not wasm", bin: []byte("hello, world"), kind: ErrMalformed, reason: "magic"},
		{name: "core module", bin: coreHeader, kind: ErrMalformed, reason: "a core module, not a component"},
		{name: "component version 0xe", bin: []byte{0, 'a', 's', 'm', 0x0e, 0, 1, 0}, kind: ErrUnsupported, construct: "component binary version 0xe"},
		{name: "truncated section", bin: cat(compHeader, []byte{secCoreModule, 100}, coreHeader[:3]), kind: ErrMalformed, section: "core module", reason: "exceeds"},
		{name: "truncated section header", bin: cat(compHeader, []byte{secType, 0x80}), kind: ErrMalformed, section: "section header", reason: "end of section"},
		{name: "gigabyte count", bin: comp(sec(secType, cat(leb(0xffffffff), []byte{0x40}))), kind: ErrMalformed, section: "type", reason: "count 4294967295 exceeds"},
		{name: "leb too long", bin: comp(sec(secType, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x01})), kind: ErrMalformed, section: "type", reason: "too large"},
		{name: "s33 of 2^32 (not type 0)", bin: comp(sec(secType, vec([]byte{0x72, 0x01, 0x01, 'a', 0x73}, []byte{0x6f, 0x01, 0x80, 0x80, 0x80, 0x80, 0x10}))), kind: ErrMalformed, section: "type", reason: "s33 out of range"},
		{name: "s33 too long", bin: comp(sec(secType, vec([]byte{0x6f, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}))), kind: ErrMalformed, section: "type", reason: "s33 too long"},
		{name: "core instance of missing module", bin: comp(sec(secCoreInstance, vec(cat([]byte{0x00}, leb(3), vec())))), kind: ErrMalformed, section: "core instance", reason: "core module index 3 out of range (0 defined)"},
		{name: "alias of missing instance", bin: comp(sec(secAlias, vec(cat([]byte{0x00, 0x00, 0x01}, leb(0), str("f"))))), kind: ErrMalformed, section: "alias", reason: "core instance index 0 out of range"},
		{name: "lift of missing core func", bin: comp(sec(secType, vec([]byte{0x40, 0x00, 0x01, 0x00})), sec(secCanon, vec(cat([]byte{0x00, 0x00}, leb(7), leb(0), leb(0))))), kind: ErrMalformed, section: "canon", reason: "core func index 7 out of range"},
		{name: "export of missing func", bin: comp(sec(secExport, vec(cat([]byte{0x00}, str("f"), []byte{0x01}, leb(0), []byte{0x00})))), kind: ErrMalformed, section: "export", reason: "func index 0 out of range"},
		{name: "type refers forward", bin: comp(sec(secType, vec([]byte{0x70, 0x05}))), kind: ErrMalformed, section: "type", reason: "type index 5 out of range"},
		{name: "own of missing resource", bin: comp(sec(secType, vec([]byte{0x69, 0x00}))), kind: ErrMalformed, section: "type", reason: "type index 0 out of range"},
		{name: "outer alias past the root", bin: comp(sec(secAlias, vec(cat([]byte{0x03, 0x02}, leb(1), leb(0))))), kind: ErrMalformed, section: "alias", reason: "levels up"},
		{name: "outer alias of a func", bin: comp(sec(secAlias, vec(cat([]byte{0x01, 0x02}, leb(0), leb(0))))), kind: ErrMalformed, section: "alias", reason: "only types"},
		{name: "trailing bytes", bin: comp(sec(secType, cat(vec([]byte{0x40, 0x00, 0x01, 0x00}), []byte{0xaa}))), kind: ErrMalformed, section: "type", reason: "1 trailing bytes"},
		{name: "unknown section", bin: comp(sec(42, nil)), kind: ErrMalformed, section: "unknown", reason: "unknown section id 42"},
		{name: "embedded non-module", bin: comp(sec(secCoreModule, compHeader)), kind: ErrMalformed, section: "core module", reason: "preamble"},
		{name: "name not utf-8", bin: comp(sec(secImport, vec(cat([]byte{0x00}, str("\xff"), []byte{0x01}, leb(0))))), kind: ErrMalformed, section: "import", reason: "UTF-8"},
		{name: "flags over 32", bin: comp(sec(secType, vec(cat([]byte{0x6e}, leb(33), []byte(strings.Repeat("\x01a", 33)))))), kind: ErrMalformed, section: "type", reason: "33 labels"},
		{name: "utf16 lift", bin: liftWith(0x01, 0x03, 0x00), kind: ErrUnsupported, section: "canon", construct: "canon lift option string-encoding=utf16"},
		{name: "latin1 lift", bin: liftWith(0x02), kind: ErrUnsupported, section: "canon", construct: "canon lift option string-encoding=latin1+utf16"},
		{name: "async lift", bin: liftWith(0x06), kind: ErrUnsupported, section: "canon", construct: "canon lift option async"},
		{name: "lift memory out of range", bin: liftWith(0x03, 0x04), kind: ErrMalformed, section: "canon", reason: "core memory index 4 out of range (1 defined)"},
		{name: "async built-in", bin: comp(sec(secCanon, vec([]byte{0x09, 0x00}))), kind: ErrUnsupported, section: "canon", construct: "canon task.return"},
		{name: "stream type", bin: comp(sec(secType, vec([]byte{0x66, 0x00}))), kind: ErrUnsupported, section: "type", construct: "stream, future or error-context type"},
		{name: "async func type", bin: comp(sec(secType, vec([]byte{0x43}))), kind: ErrUnsupported, section: "type", construct: "async func type"},
		{name: "start section", bin: comp(sec(secStart, []byte{0x00})), kind: ErrUnsupported, section: "start", construct: "start section (component-level start function)"},
		{name: "value section", bin: comp(sec(secValue, []byte{0x00})), kind: ErrUnsupported, section: "value", construct: "value section"},
		{name: "error in nested component", bin: comp(sec(secComponent, comp(sec(secStart, []byte{0x00})))), kind: ErrUnsupported, section: "start", construct: "start section (component-level start function)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(tc.bin)
			if c != nil || !errors.Is(err, tc.kind) {
				t.Fatalf("Parse = %v, %v; want %v", c, err, tc.kind)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not a *Error", err)
			}
			if e.Section != tc.section || e.Construct != tc.construct || !strings.Contains(e.Reason, tc.reason) {
				t.Fatalf("got section %q construct %q reason %q; want %q %q %q", e.Section, e.Construct, e.Reason, tc.section, tc.construct, tc.reason)
			}
			if e.Offset < 0 || e.Offset > len(tc.bin) {
				t.Fatalf("offset %d outside the %d-byte binary", e.Offset, len(tc.bin))
			}
			if errors.Is(err, ErrUnsupported) && e.Hint == "" {
				t.Fatalf("unsupported without a hint: %v", err)
			}
		})
	}
}

// TestReaderLEB: the reader's integers keep their widths (u32, s33, u64)
// and report a bad encoding as ErrMalformed after the byte at fault.
func TestReaderLEB(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		read func(*reader) int64
		v    int64
		pos  int // where the read stops, and an error's offset
		bad  bool
	}{
		{"u32 max", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, func(r *reader) int64 { return int64(r.u32()) }, 1<<32 - 1, 5, false},
		{"u32 unused bit", []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, func(r *reader) int64 { return int64(r.u32()) }, 0, 5, true},
		{"u32 sixth byte", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, func(r *reader) int64 { return int64(r.u32()) }, 0, 5, true},
		{"u32 truncated", []byte{0x80, 0x80}, func(r *reader) int64 { return int64(r.u32()) }, 0, 2, true},
		{"u64 max", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, func(r *reader) int64 { return int64(r.leb(64)) }, -1, 10, false},
		{"s33 max index", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, (*reader).s33, 1<<32 - 1, 5, false},
		{"s33 primitive code", []byte{0x7f, 0x00}, (*reader).s33, -1, 1, false},
		{"s33 min", []byte{0x80, 0x80, 0x80, 0x80, 0x70}, (*reader).s33, -1 << 32, 5, false},
		{"s33 2^32", []byte{0x80, 0x80, 0x80, 0x80, 0x10}, (*reader).s33, 0, 5, true},
		{"s33 truncated", []byte{0xff}, (*reader).s33, 0, 1, true},
	} {
		r := &reader{b: tc.in, base: 100, section: "type"}
		v := tc.read(r)
		if v != tc.v || r.pos != tc.pos || (r.err != nil) != tc.bad {
			t.Errorf("%s: got %d at %d, err %v; want %d at %d, error %v", tc.name, v, r.pos, r.err, tc.v, tc.pos, tc.bad)
			continue
		}
		if tc.bad && (!errors.Is(r.err, ErrMalformed) || r.err.Offset != 100+tc.pos) {
			t.Errorf("%s: error %v at %d; want ErrMalformed at %d", tc.name, r.err, r.err.Offset, 100+tc.pos)
		}
	}
}

func TestErrorOffsets(t *testing.T) {
	// The truncated section's header starts right after the preamble.
	_, err := Parse(cat(compHeader, []byte{secCoreModule, 100}, coreHeader[:3]))
	var e *Error
	if !errors.As(err, &e) || e.Offset != 8 {
		t.Fatalf("err %v: want offset 8", err)
	}
	// An error in a nested component is reported at its offset in the
	// outer binary: preamble (8) + section id and size (2) + its own
	// preamble (8) = the nested start section's header at 18, body at 20.
	_, err = Parse(comp(sec(secComponent, comp(sec(secStart, []byte{0x00})))))
	if !errors.As(err, &e) || e.Offset != 20 {
		t.Fatalf("err %v: want offset 20", err)
	}
	if !strings.Contains(err.Error(), "start section at offset 0x14") {
		t.Fatalf("message %q does not name the section and offset", err)
	}
}

func TestParseValid(t *testing.T) {
	nested := comp(
		sec(secAlias, vec(cat([]byte{0x03, 0x02}, leb(1), leb(0)))), // outer type 0 of the parent
		sec(secImport, vec(cat([]byte{0x00}, str("import-func-f"), []byte{0x01}, leb(0)))),
		sec(secExport, vec(cat([]byte{0x00}, str("f"), []byte{0x01}, leb(0), []byte{0x00}))),
	)
	bin := comp(append(append([][]byte{}, liftable...),
		sec(secCustom, cat(str("producers"), []byte{1, 2, 3})),
		sec(secCanon, vec(cat([]byte{0x00, 0x00}, leb(0), vec([]byte{0x00}, []byte{0x03, 0x00}), leb(0)))),
		sec(secComponent, nested),
		sec(secInstance, vec(cat([]byte{0x00}, leb(0), vec(cat(str("import-func-f"), []byte{0x01}, leb(0)))))),
		sec(secType, vec(
			[]byte{0x72, 0x02, 0x01, 'a', 0x79, 0x01, 'b', 0x73},                   // record {a: u32, b: string}
			[]byte{0x71, 0x02, 0x01, 'x', 0x00, 0x00, 0x01, 'y', 0x01, 0x01, 0x00}, // variant {x, y(type 1)}
			[]byte{0x6a, 0x01, 0x73, 0x00},                                         // result<string>
			[]byte{0x3f, 0x7f, 0x00},                                               // resource
			[]byte{0x69, 0x04},                                                     // own<4>
			[]byte{0x42, 0x02, 0x04, 0x00, 0x01, 'r', 0x03, 0x01, 0x04, 0x00, 0x01, 'g', 0x03, 0x00, 0x00}, // instance type {export r: resource, export g: type eq r}
		)),
		sec(secExport, vec(cat([]byte{0x00}, str("capsule:guest/tool@1.0.0"), []byte{0x05}, leb(0), []byte{0x00}))),
	)...)
	c, err := Parse(bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.CoreModules) != 1 || len(c.CoreInstances) != 1 || len(c.Components) != 1 || len(c.Instances) != 1 {
		t.Fatalf("counts: %+v", c)
	}
	if c.Size[SortFunc] != 1 || c.Size[SortCoreFunc] != 1 || c.Size[SortCoreMemory] != 1 || c.Size[SortType] != 7 || c.Size[SortInstance] != 2 {
		t.Fatalf("index spaces %v", c.Size)
	}
	lift := c.Canons[0]
	if lift.Kind != CanonLift || lift.Memory != 0 || lift.Realloc != -1 || lift.PostReturn != -1 {
		t.Fatalf("lift %+v", lift)
	}
	if len(c.Exports) != 1 || c.Exports[0].Name != "capsule:guest/tool@1.0.0" || c.Exports[0].Sort != SortInstance {
		t.Fatalf("exports %+v", c.Exports)
	}
	if in := c.Components[0]; len(in.Imports) != 1 || in.Imports[0].Sort != SortFunc || len(in.Exports) != 1 {
		t.Fatalf("nested %+v", in)
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		bin  []byte
		want Kind
		ok   bool
	}{
		{coreHeader, KindCoreModule, true},
		{compHeader, KindComponent, true},
		{[]byte{0, 'a', 's', 'm', 2, 0, 0, 0}, KindUnknown, false},
		{[]byte("\x00asm"), KindUnknown, false},
		{nil, KindUnknown, false},
	} {
		k, err := Detect(tc.bin)
		if k != tc.want || (err == nil) != tc.ok {
			t.Errorf("Detect(% x) = %v, %v; want %v (ok %v)", tc.bin, k, err, tc.want, tc.ok)
		}
	}
}

func TestCheckCore(t *testing.T) {
	served := []string{"capsule:process/host@1.1.0", "capsule:process/host@1.0.0"}
	if err := CheckCore(coreHeader, served); err != nil {
		t.Fatalf("core module: %v", err)
	}
	if err := CheckCore([]byte("not wasm at all"), served); err != nil {
		t.Fatalf("not wasm is the engine's to report: %v", err)
	}
	var e *Error
	err := CheckCore(comp(instanceImport("wasi:cli/environment@0.2.12")), served)
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, &e) || e.Construct != `import "wasi:cli/environment@0.2.12"` ||
		!strings.Contains(e.Reason, "capsule:process/host@1.1.0") || !strings.Contains(e.Hint, "capsule-host wit --out") {
		t.Fatalf("wasi import not served: %v", err)
	}
	withWASI := append([]string{"wasi:cli/environment@0.2.12"}, served...)
	err = CheckCore(comp(instanceImport("wasi:cli/environment@0.3.0")), withWASI)
	if !errors.As(err, &e) || !strings.Contains(e.Reason, "WASI 0.3 (async) is not supported") {
		t.Fatalf("wasi 0.3 import: %v", err)
	}
	err = CheckCore(comp(instanceImport("acme:db/query@1.0.0")), served)
	if !errors.As(err, &e) || !strings.Contains(e.Reason, "capsule:process/host@1.1.0") {
		t.Fatalf("unknown import: %v", err)
	}
	// Served imports (0.2.x semver-compatibly): the component is simply
	// not an engine's to compile, and the message says where it goes.
	err = CheckCore(comp(append(append([][]byte{}, liftable...), instanceImport("capsule:process/host@1.1.0"), instanceImport("wasi:cli/environment@0.2.3"))...), withWASI)
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, &e) || e.Construct != "a component" || !strings.Contains(err.Error(), "component.Compile") {
		t.Fatalf("served imports only: %v", err)
	}
	if strings.Contains(err.Error(), "not served") || strings.Contains(err.Error(), "not implemented") {
		t.Fatalf("stale text in %q", err)
	}
	if err := CheckCore(comp(sec(secType, []byte{0x05})), served); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed component: %v", err)
	}
	if err := CheckCore([]byte{0, 'a', 's', 'm', 0x0e, 0, 1, 0}, served); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("component version 0xe: %v", err)
	}
}

package cabi_test

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/engine"
	. "github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/host/internal/cabi/cabitest"
)

func flat(s string) []engine.ValueType {
	var out []engine.ValueType
	for _, w := range strings.Fields(s) {
		out = append(out, map[string]engine.ValueType{"i32": engine.I32, "i64": engine.I64, "f32": engine.F32, "f64": engine.F64}[w])
	}
	return out
}

// TestLayout checks size, alignment and flattening of the generic
// constructors against values derived by hand from CanonicalABI.md.
func TestLayout(t *testing.T) {
	many := make([]string, 257)
	for i := range many {
		many[i] = "c"
	}
	tests := []struct {
		name        string
		t           *Type
		size, align uint32
		flat        string
	}{
		{"bool", Bool, 1, 1, "i32"},
		{"u8", U8, 1, 1, "i32"},
		{"u16", U16, 2, 2, "i32"},
		{"s32", S32, 4, 4, "i32"},
		{"u64", U64, 8, 8, "i64"},
		{"f32", F32, 4, 4, "f32"},
		{"f64", F64, 8, 8, "f64"},
		{"char", Char, 4, 4, "i32"},
		{"string", String, 8, 4, "i32 i32"},
		{"list<u64>", List(U64), 8, 4, "i32 i32"},
		{"own", Own("r"), 4, 4, "i32"},
		{"borrow", Borrow("r"), 4, 4, "i32"},
		{"record{u8,u64,u16}", Record("r", F("a", U8), F("b", U64), F("c", U16)), 24, 8, "i32 i64 i32"},
		{"record{}", Record("e"), 0, 1, ""},
		{"tuple<u8,u8>", Record("", F("0", U8), F("1", U8)), 2, 1, "i32 i32"},
		{"option<u64>", Option(U64), 16, 8, "i32 i64"},
		{"option<u8>", Option(U8), 2, 1, "i32 i32"},
		{"option<string>", Option(String), 12, 4, "i32 i32 i32"},
		{"result", Result(nil, nil), 1, 1, "i32"},
		{"result<_, u8>", Result(nil, U8), 2, 1, "i32 i32"},
		{"result<string, string>", Result(String, String), 12, 4, "i32 i32 i32"},
		{"enum 3", Enum("e", "a", "b", "c"), 1, 1, "i32"},
		{"enum 257", Enum("e", many...), 2, 2, "i32"},
		{"variant{a, b(u32), c(string)}", VariantOf("v", C("a", nil), C("b", U32), C("c", String)), 12, 4, "i32 i32 i32"},
		// join: i32 with f32 stays i32; i32 with i64 widens; f32 with i64 and f64 with i32 widen.
		{"variant{f32, u32}", VariantOf("v", C("a", F32), C("b", U32)), 8, 4, "i32 i32"},
		{"variant{f32, u64}", VariantOf("v", C("a", F32), C("b", U64)), 16, 8, "i32 i64"},
		{"variant{f64, u32}", VariantOf("v", C("a", F64), C("b", U32)), 16, 8, "i32 i64"},
		{"variant{f32, f32}", VariantOf("v", C("a", F32), C("b", F32)), 8, 4, "i32 f32"},
		{"variant{string, u64}", VariantOf("v", C("a", String), C("b", U64)), 16, 8, "i32 i64 i32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.t.Size() != tc.size || tc.t.Align() != tc.align {
				t.Errorf("size/align = %d/%d, want %d/%d", tc.t.Size(), tc.t.Align(), tc.size, tc.align)
			}
			if got := FlatString(tc.t.Flat()); got != FlatString(flat(tc.flat)) {
				t.Errorf("flat = %q, want %q", got, tc.flat)
			}
		})
	}
}

func TestSignatures(t *testing.T) {
	big := Record("big", F("a", Record("", F("x", U64), F("y", U64), F("z", U64), F("w", U64), F("v", U64), F("u", U64), F("t", U64), F("s", U64), F("r", U64))),
		F("b", Record("", F("x", U64), F("y", U64), F("z", U64), F("w", U64), F("v", U64), F("u", U64), F("t", U64), F("s", U64))))
	tests := []struct {
		f                *Func
		imp, exp         string
		usesMemory       bool
		paramsBypointer_ bool
	}{
		{NewFunc("noop", nil), "(func)", "() -> ()", false, false},
		{NewFunc("drop", nil, F("self", Own("r"))), "(func (param i32))", "(i32) -> ()", false, false},
		{NewFunc("u32", U32, F("s", String)), "(func (param i32 i32) (result i32))", "(i32 i32) -> (i32)", true, false},
		{NewFunc("str", String), "(func (param i32))", "() -> (i32)", true, false},
		{NewFunc("opt", Option(U64), F("x", U64)), "(func (param i64 i32))", "(i64) -> (i32)", true, false},
		{NewFunc("big", U32, F("b", big)), "(func (param i32) (result i32))", "(i32) -> (i32)", true, true},
		{NewFunc("bigres", Result(nil, String), F("b", big)), "(func (param i32 i32))", "(i32) -> (i32)", true, true},
	}
	for _, tc := range tests {
		if got := tc.f.Signature(); got != tc.imp {
			t.Errorf("%s import = %s, want %s", tc.f.Name, got, tc.imp)
		}
		p, r := tc.f.ExportSignature()
		if got := "(" + FlatString(p) + ") -> (" + FlatString(r) + ")"; got != tc.exp {
			t.Errorf("%s export = %s, want %s", tc.f.Name, got, tc.exp)
		}
		if tc.f.UsesMemory() != tc.usesMemory {
			t.Errorf("%s UsesMemory = %v", tc.f.Name, !tc.usesMemory)
		}
	}
}

// sample is one value of every kind, for round trips.
var sampleType = Record("all",
	F("b", Bool), F("u8", U8), F("u16", U16), F("u32", U32), F("u64", U64),
	F("s8", S8), F("s16", S16), F("s32", S32), F("s64", S64),
	F("f32", F32), F("f64", F64), F("ch", Char), F("s", String), F("empty", String),
	F("bytes", List(U8)), F("strs", List(String)),
	F("recs", List(Record("kv", F("k", String), F("v", Option(U64))))),
	F("opt", Option(String)), F("none", Option(U64)),
	F("res", Result(U32, String)), F("err", Result(nil, VariantOf("ec", C("a", nil), C("b", String), C("c", U64)))),
	F("en", Enum("e", "x", "y", "z")),
	F("v", VariantOf("v", C("a", F32), C("b", U64), C("c", String))),
	F("h", Own("r")),
)

var sampleValue = []Value{
	true, uint8(200), uint16(60000), uint32(4000000000), uint64(1 << 60),
	int8(-5), int16(-300), int32(-70000), int64(-1 << 40),
	float32(1.5), float64(-2.25), rune('é'), "héllo", "",
	[]byte{0, 1, 2, 255}, []Value{"a", "", "ccc"},
	[]Value{[]Value{"k1", Some(uint64(7))}, []Value{"k2", None}},
	Some("x"), None,
	Ok(uint32(9)), Err(Variant{Case: 2, Payload: uint64(1 << 62)}),
	uint32(2),
	Variant{Case: 0, Payload: float32(3.25)},
	uint32(7),
}

func TestStoreLoadRoundTrip(t *testing.T) {
	c := cabitest.New(1<<16, 1024)
	l := &Lowerer{Ctx: context.Background(), Caller: c}
	if err := l.Store(sampleType, 64, sampleValue); err != nil {
		t.Fatal(err)
	}
	got, err := Load(c.Mem, sampleType, 64)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, Value(sampleValue)) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, sampleValue)
	}
}

func TestFlatRoundTrip(t *testing.T) {
	c := cabitest.New(1<<16, 1024)
	l := &Lowerer{Ctx: context.Background(), Caller: c}
	vals, err := l.LowerFlat(sampleType, sampleValue, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != len(sampleType.Flat()) {
		t.Fatalf("lowered %d flat values, type flattens to %d", len(vals), len(sampleType.Flat()))
	}
	got, err := LiftFlat(c.Mem, sampleType, vals)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, Value(sampleValue)) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, sampleValue)
	}
}

// TestFuncByPointer covers the >16 flat params convention both ways.
func TestFuncByPointer(t *testing.T) {
	var fields []Field
	var vals []Value
	for i := 0; i < 9; i++ {
		fields = append(fields, F(string(rune('a'+i)), String))
		vals = append(vals, strings.Repeat("x", i))
	}
	f := NewFunc("wide", Result(String, nil), fields...) // 18 flat params
	if p, _ := f.ImportSignature(); len(p) != 2 {
		t.Fatalf("import params %v, want params pointer + retptr", p)
	}
	c := cabitest.New(1<<16, 1024)
	stack, err := f.LowerArgs(context.Background(), c, vals...)
	if err != nil {
		t.Fatal(err)
	}
	if len(stack) != 1 {
		t.Fatalf("export args %v, want one pointer", stack)
	}
	got, err := f.LiftParams(c.Mem, stack)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, vals) {
		t.Fatalf("got %#v", got)
	}
	// Result through retptr at 512.
	stack = append(stack, 512)
	if err := f.LowerResult(context.Background(), c, stack, Ok("done")); err != nil {
		t.Fatal(err)
	}
	r, err := f.LiftResult(c.Mem, []uint64{512})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, Value(Ok("done"))) {
		t.Fatalf("result %#v", r)
	}
}

func le32(b []byte, off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }

// TestLiftTraps: every malformed input is an ErrABI error naming the
// problem, never a panic.
func TestLiftTraps(t *testing.T) {
	mem := &cabitest.Memory{B: make([]byte, 4096)}
	copy(mem.B[100:], "ok\xff\xfe")
	copy(mem.B[200:], "\xed\xa0\x80") // an encoded surrogate
	tests := []struct {
		name string
		t    *Type
		vals []uint64
		want string
	}{
		{"string out of bounds", String, []uint64{4090, 10}, "out of bounds"},
		{"string past 4GiB", String, []uint64{0xffffffff, 2}, "out of bounds"},
		{"string too long", String, []uint64{0, 1 << 28}, "exceeds 2^28-1"},
		{"invalid UTF-8", String, []uint64{100, 4}, "not valid UTF-8 (first bad byte at offset 2)"},
		{"surrogate", String, []uint64{200, 3}, "not valid UTF-8"},
		{"list misaligned", List(U32), []uint64{2, 1}, "not aligned to 4"},
		{"list out of bounds", List(U64), []uint64{4088, 2}, "out of bounds"},
		{"list too long", List(U64), []uint64{0, 1 << 26}, "exceeds 2^28-1"},
		{"list of empty records", List(Record("e")), []uint64{0, 1 << 30}, "exceeds 2^28-1"},
		{"variant discriminant", Option(U32), []uint64{2, 0}, "discriminant 2 out of range"},
		{"enum discriminant", Enum("e", "a"), []uint64{1}, "discriminant 1 out of range"},
		{"char surrogate", Char, []uint64{0xD800}, "not a Unicode scalar value"},
		{"char too big", Char, []uint64{0x110000}, "not a Unicode scalar value"},
		{"too few values", Record("r", F("a", U32), F("b", U32)), []uint64{1}, "too few flat values"},
		{"nested path", Record("r", F("a", List(Record("kv", F("k", String))))), []uint64{16, 1}, ".a[0].k: "},
	}
	le32(mem.B, 16, 4000) // kv.k.ptr
	le32(mem.B, 20, 200)  // kv.k.len: past the end
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LiftFlat(mem, tc.t, tc.vals)
			if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrABI containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadChecksPointer(t *testing.T) {
	mem := &cabitest.Memory{B: make([]byte, 64)}
	if _, err := Load(mem, U64, 4); !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "not aligned") {
		t.Errorf("misaligned: %v", err)
	}
	if _, err := Load(mem, U64, 64); !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "out of bounds") {
		t.Errorf("out of bounds: %v", err)
	}
	if _, err := Load(mem, U64, 0xfffffff8); !errors.Is(err, ErrABI) {
		t.Errorf("wraparound: %v", err)
	}
}

// TestLowerTraps: a hostile cabi_realloc or return pointer is refused.
func TestLowerTraps(t *testing.T) {
	rt := Result(String, nil)
	tests := []struct {
		name   string
		hook   func(align, size uint32) (uint32, error)
		retptr uint32
		want   string
	}{
		{"retptr misaligned", nil, 2, "not aligned to 4"},
		{"retptr out of bounds", nil, 4092, "out of bounds"},
		{"retptr wraps", nil, 0xfffffffc, "out of bounds"},
		{"realloc out of bounds", func(a, s uint32) (uint32, error) { return 4095, nil }, 0, "out of bounds"},
		{"realloc past 4GiB", func(a, s uint32) (uint32, error) { return 0xffffffff, nil }, 0, "out of bounds"},
		{"realloc fails", func(a, s uint32) (uint32, error) { return 0, errors.New("guest trapped") }, 0, "guest trapped"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cabitest.New(4096, 1024)
			c.Hook = tc.hook
			l := &Lowerer{Ctx: context.Background(), Caller: c}
			err := l.Store(rt, tc.retptr, Ok("some text"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// Misaligned realloc result for a list<u64>.
	c := cabitest.New(4096, 1024)
	c.Hook = func(a, s uint32) (uint32, error) { return 1028, nil }
	l := &Lowerer{Ctx: context.Background(), Caller: c}
	err := l.Store(List(U64), 0, []Value{uint64(1)})
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "not aligned to 8") {
		t.Fatalf("misaligned realloc: %v", err)
	}
	// A host value of the wrong shape is reported, not a panic.
	if err := l.Store(String, 0, 42); !errors.Is(err, ErrABI) {
		t.Fatalf("bad host value: %v", err)
	}
}

// TestEmptyNoRealloc: empty strings and lists take no guest call and are
// lowered as (align, 0).
func TestEmptyNoRealloc(t *testing.T) {
	c := cabitest.New(4096, 1024)
	l := &Lowerer{Ctx: context.Background(), Caller: c}
	vals, err := l.LowerFlat(Record("", F("s", String), F("l", List(U64))), []Value{"", []Value{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Calls != 0 || !reflect.DeepEqual(vals, []uint64{1, 0, 8, 0}) {
		t.Fatalf("calls %d, vals %v", c.Calls, vals)
	}
}

func TestTable(t *testing.T) {
	var tb Table[string]
	a, _ := tb.Add("r", "a")
	b, _ := tb.Add("r", "b")
	if a != 1 || b != 2 {
		t.Fatalf("first indices %d %d, want 1 2 (0 reserved)", a, b)
	}
	if v, err := tb.Get("r", 1); err != nil || v != "a" {
		t.Fatalf("get: %v %v", v, err)
	}
	if _, err := tb.Remove("r", 1); err != nil {
		t.Fatal(err)
	}
	check := func(name string, err error, want string) {
		t.Helper()
		var he *HandleError
		if !errors.As(err, &he) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want HandleError %q", name, err, want)
		}
	}
	_, err := tb.Get("r", 0)
	check("null", err, "reserved null handle")
	_, err = tb.Get("r", 99)
	check("forged", err, "never created")
	_, err = tb.Get("r", 1)
	check("dropped", err, "already dropped")
	_, err = tb.Remove("r", 1)
	check("double drop", err, "already dropped")
	_, err = tb.Get("other", 2)
	check("wrong type", err, "is a r handle")
	if c, _ := tb.Add("r", "c"); c != 1 {
		t.Fatalf("free slot not reused: got %d", c)
	}
	if tb.Len() != 2 {
		t.Fatalf("len %d", tb.Len())
	}
	if got := tb.Drain(); !reflect.DeepEqual(got, []string{"c", "b"}) {
		t.Fatalf("drain %v", got)
	}
	if d, _ := tb.Add("r", "d"); d != 1 || tb.Len() != 1 {
		t.Fatalf("after drain: index %d len %d", d, tb.Len())
	}
}

// TestLiftBudget: a list of strings that all alias one large range cannot
// make the host copy more than LiftBudget bytes.
func TestLiftBudget(t *testing.T) {
	const mib = 1 << 20
	mem := &cabitest.Memory{B: make([]byte, 2*mib)}
	for i := 0; i < 300; i++ {
		le32(mem.B, 8*i, mib)
		le32(mem.B, 8*i+4, mib)
	}
	_, err := LiftFlat(mem, List(String), []uint64{0, 300})
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "lift budget") {
		t.Fatalf("err = %v, want lift budget error", err)
	}
	if _, err := LiftFlat(mem, List(String), []uint64{0, 20}); err != nil {
		t.Fatalf("20 MiB is within budget: %v", err)
	}
}

package goadapt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"
)

// tiny builds a small core module the way Go lays one out: one defined
// function, one memory of 2 pages, one global, an export, a data segment
// holding the arena descriptor for [base, base+size), and a name section
// naming the function. withType puts the realloc func type in already.
func tiny(base, size uint64, withType bool) []byte { return tinyN(base, size, withType, 1) }

// tinyN is tiny with the descriptor copies times in its data segment.
func tinyN(base, size uint64, withType bool, copies int) []byte {
	sec := func(b []byte, id byte, payload []byte) []byte {
		return append(appendULEB(append(b, id), uint64(len(payload))), payload...)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	types, fn := []byte{1, 0x60, 0, 0}, byte(0) // () -> ()
	if withType {
		types, fn = append([]byte{2}, append([]byte(reallocSig), 0x60, 0, 0)...), 1
	}
	b = sec(b, secType, types)
	b = sec(b, secFunc, []byte{1, fn})
	b = sec(b, secMemory, []byte{1, 0, 2})
	b = sec(b, secGlobal, []byte{1, 0x7f, 1, 0x41, 0, 0x0b})
	b = sec(b, secExport, append(appendName([]byte{2}, "f"), 0, 0, 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0))
	b = sec(b, secCode, []byte{1, 2, 0, 0x0b})
	desc := append([]byte("xx"+ArenaMagic), make([]byte, 16)...)
	binary.LittleEndian.PutUint64(desc[2+16:], base)
	binary.LittleEndian.PutUint64(desc[2+24:], size)
	desc = bytes.Repeat(desc, copies)
	data := appendULEB([]byte{1, 0, 0x41, 0x80, 0x08, 0x0b}, uint64(len(desc))) // at 1024
	b = sec(b, secData, append(data, desc...))
	names := append(appendName(nil, "name"), 1)
	sub := appendName([]byte{1, 0}, "f")
	names = append(appendULEB(names, uint64(len(sub))), sub...)
	return sec(b, secCustom, names)
}

// TestInjectAllocator runs the injected allocator on wazero: aligned
// addresses from the arena, a trap when it is used up, for a realloc of
// a live block and for an alignment that is no power of two.
func TestInjectAllocator(t *testing.T) {
	for _, withType := range []bool{false, true} {
		out, a, err := Inject(tiny(4096, 100, withType))
		if err != nil {
			t.Fatal(err)
		}
		if a != (Arena{4096, 100}) {
			t.Fatalf("arena %+v", a)
		}
		ctx := context.Background()
		rt := wazero.NewRuntime(ctx)
		t.Cleanup(func() { rt.Close(ctx) })
		inst := func() func(args ...uint64) (uint64, error) {
			m, err := rt.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithName(""))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close(ctx) })
			f := m.ExportedFunction(ExportName)
			if f == nil || f.Definition().Name() != ExportName {
				t.Fatalf("no %s (named %v)", ExportName, f)
			}
			return func(args ...uint64) (uint64, error) {
				r, err := f.Call(ctx, args...)
				if err != nil {
					return 0, err
				}
				return r[0], nil
			}
		}
		call := inst()
		for _, tc := range []struct{ align, size, want uint64 }{{1, 3, 4096}, {8, 10, 4104}, {16, 0, 4128}, {4, 60, 4128}, {1, 8, 4188}} {
			if got, err := call(0, 0, tc.align, tc.size); err != nil || got != tc.want {
				t.Fatalf("alloc(align %d, %d) = %d, %v; want %d", tc.align, tc.size, got, err, tc.want)
			}
		}
		if _, err := call(0, 0, 1, 1); err == nil {
			t.Fatal("an allocation past the arena did not trap")
		}
		for _, args := range [][]uint64{{4096, 3, 1, 8}, {0, 0, 3, 1}, {0, 0, 0, 1}, {0, 0, 1 << 31, 1}, {0, 0, 1, 0xffffffff}} {
			if _, err := inst()(args...); err == nil {
				t.Fatalf("alloc%v did not trap", args)
			}
		}
	}
}

// TestInjectGoCapsule adapts the committed testcap: the output is
// valid (wazero compiles it), byte-identical on a second run, names the
// new function, and a second Inject refuses it as already adapted.
func TestInjectGoCapsule(t *testing.T) {
	core, err := os.ReadFile(filepath.Join("..", "..", "capsules", "testcap", "testcap.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	out, a, err := Inject(core)
	if err != nil {
		t.Fatal(err)
	}
	again, _, _ := Inject(core)
	if !bytes.Equal(out, again) {
		t.Fatal("two runs differ")
	}
	if a.Size != 256<<10 {
		t.Fatalf("arena %+v", a)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	d := cm.ExportedFunctions()[ExportName]
	if d == nil || d.Name() != ExportName || len(d.ParamTypes()) != 4 || len(d.ResultTypes()) != 1 {
		t.Fatalf("export %v", d)
	}
	if _, _, err := Inject(out); !errors.Is(err, ErrAdapted) {
		t.Fatalf("second Inject: %v", err)
	}
}

// TestInjectRefuses: each bad input gets its typed error.
func TestInjectRefuses(t *testing.T) {
	good := tiny(4096, 100, false)
	noMagic := bytes.Replace(good, []byte(ArenaMagic), []byte("capsule:arena:v0"), 1)
	dup := tiny(4096, 100, false)
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"component", []byte("\x00asm\x0d\x00\x01\x00"), ErrUnsupported},
		{"truncated", good[:len(good)-3], ErrMalformed},
		{"no descriptor", noMagic, ErrNoArena},
		{"arena outside memory", tiny(2<<16-8, 16, false), ErrNoArena},
		{"arena zero size", tiny(4096, 0, false), ErrNoArena},
		{"arena over the data", tiny(1024, 64, false), ErrNoArena},
		{"unaligned arena", tiny(4097, 64, false), ErrNoArena},
		{"two descriptors", tinyN(4096, 100, false, 2), ErrNoArena},
		{"duplicate section", append(dup, dup[8:]...), ErrMalformed},
		{"huge count", append([]byte("\x00asm\x01\x00\x00\x00\x01\x05"), 0xff, 0xff, 0xff, 0xff, 0x0f), ErrMalformed},
	} {
		_, _, err := Inject(tc.in)
		var e *Error
		if !errors.Is(err, tc.want) || !errors.As(err, &e) || e.Reason == "" {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzInject: any input gets either an adapted module that parses again
// (and is refused as already adapted) or a typed *Error; never a panic.
func FuzzInject(f *testing.F) {
	f.Add(tiny(4096, 100, false))
	f.Add(tiny(4096, 100, true))
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, _, err := Inject(in)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !(errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNoArena) || errors.Is(err, ErrAdapted)) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if _, _, err := Inject(out); !errors.Is(err, ErrAdapted) {
			t.Fatalf("re-inject: %v", err)
		}
	})
}

// TestReaderLEB: uleb and sleb keep their widths and report a bad
// encoding as ErrMalformed at the byte after the one at fault, reading
// nothing past the reader's end.
func TestReaderLEB(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		end  int
		read func(*reader) int64
		v    int64
		pos  int // where the read stops, and an error's offset
		bad  bool
	}{
		{"u32 max", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 5, func(r *reader) int64 { return int64(r.u32()) }, 1<<32 - 1, 5, false},
		{"u32 unused bit", []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, 5, func(r *reader) int64 { return int64(r.u32()) }, 0, 5, true},
		{"u32 past the end", []byte{0x80, 0x01}, 1, func(r *reader) int64 { return int64(r.u32()) }, 0, 1, true},
		{"u64 limits minimum", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 10, func(r *reader) int64 { return int64(r.uleb(64)) }, -1, 10, false},
		{"u64 eleventh byte", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 11, func(r *reader) int64 { return int64(r.uleb(64)) }, 0, 10, true},
		{"i32.const min", []byte{0x80, 0x80, 0x80, 0x80, 0x78}, 5, func(r *reader) int64 { return r.sleb(32) }, -1 << 31, 5, false},
		{"i32.const 2^31", []byte{0x80, 0x80, 0x80, 0x80, 0x08}, 5, func(r *reader) int64 { return r.sleb(32) }, 0, 5, true},
		{"i64.const min", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}, 10, func(r *reader) int64 { return r.sleb(64) }, -1 << 63, 10, false},
		{"i64.const tenth byte not sign", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 10, func(r *reader) int64 { return r.sleb(64) }, 0, 10, true},
	} {
		r := newReader(tc.in, 0, tc.end, "data")
		v := tc.read(r)
		if v != tc.v || r.pos != tc.pos || (r.err != nil) != tc.bad {
			t.Errorf("%s: got %d at %d, err %v; want %d at %d, error %v", tc.name, v, r.pos, r.err, tc.v, tc.pos, tc.bad)
			continue
		}
		if tc.bad && (!errors.Is(r.err, ErrMalformed) || r.err.Offset != tc.pos) {
			t.Errorf("%s: error %v; want ErrMalformed at %d", tc.name, r.err, tc.pos)
		}
	}
}

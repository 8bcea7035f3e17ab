package engine

import (
	"errors"
	"slices"
	"testing"

	"github.com/capsule-host/capsule-host/internal/leb128"
)

// coreModule is a preamble and the given sections, each as id and body.
func coreModule(sections ...[]byte) []byte {
	out := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range sections {
		out = append(leb128.AppendUnsigned(append(out, s[0]), uint64(len(s)-1)), s[1:]...)
	}
	return out
}

func coreName(s string) []byte { return append(leb128.AppendUnsigned(nil, uint64(len(s))), s...) }

// externsModule imports a func, a table, a memory (with a maximum) and a
// global from "m", and exports a func and a memory.
func externsModule() []byte {
	imp := []byte{2, 4}
	imp = append(append(append(imp, coreName("m")...), coreName("f")...), 0x00, 0x00)
	imp = append(append(append(imp, coreName("m")...), coreName("t")...), 0x01, 0x70, 0x00, 0x01)
	imp = append(append(append(imp, coreName("m")...), coreName("mem")...), 0x02, 0x01, 0x01, 0x80, 0x02)
	imp = append(append(append(imp, coreName("m")...), coreName("g")...), 0x03, 0x7f, 0x00)
	exp := []byte{7, 2}
	exp = append(append(exp, coreName("run")...), 0x00, 0x00)
	exp = append(append(exp, coreName("memory")...), 0x02, 0x00)
	return coreModule(imp, exp)
}

func TestCoreExterns(t *testing.T) {
	imps, exps, err := CoreExterns(externsModule())
	if err != nil {
		t.Fatal(err)
	}
	wantImps := []ExternDef{{"m", "f", ExternFunc}, {"m", "t", ExternTable}, {"m", "mem", ExternMemory}, {"m", "g", ExternGlobal}}
	wantExps := []ExternDef{{"", "run", ExternFunc}, {"", "memory", ExternMemory}}
	if !slices.Equal(imps, wantImps) || !slices.Equal(exps, wantExps) {
		t.Fatalf("got %v %v; want %v %v", imps, exps, wantImps, wantExps)
	}
}

// TestCoreExternsRefuses: a malformed section is ErrCoreBinary, LEB128
// faults included (too long, unused bits set, truncated).
func TestCoreExternsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"no preamble", []byte("\x00asm")},
		{"section size too long", append([]byte("\x00asm\x01\x00\x00\x00\x02"), 0x80, 0x80, 0x80, 0x80, 0x80, 0x00)},
		{"section size unused bits", append([]byte("\x00asm\x01\x00\x00\x00\x02"), 0x80, 0x80, 0x80, 0x80, 0x10)},
		{"section size truncated", append([]byte("\x00asm\x01\x00\x00\x00\x02"), 0x80)},
		{"section past the end", []byte("\x00asm\x01\x00\x00\x00\x02\x05\x01")},
		{"count unused bits", coreModule([]byte{7, 0x80, 0x80, 0x80, 0x80, 0x10})},
		{"count past the section", coreModule([]byte{7, 0x05})},
		{"export index truncated", coreModule(append(append([]byte{7, 1}, coreName("f")...), 0x00, 0x80))},
		{"tag kind", coreModule(append(append([]byte{7, 1}, coreName("f")...), 0x04, 0x00))},
	} {
		if _, _, err := CoreExterns(tc.in); !errors.Is(err, ErrCoreBinary) {
			t.Errorf("%s: %v, want ErrCoreBinary", tc.name, err)
		}
	}
}

// FuzzCoreExterns: any input gets the externs or ErrCoreBinary, never a
// panic.
func FuzzCoreExterns(f *testing.F) {
	f.Add(externsModule())
	f.Add(coreModule([]byte{7, 0x80, 0x80, 0x80, 0x80, 0x10}))
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, _, err := CoreExterns(in); err != nil && !errors.Is(err, ErrCoreBinary) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

package cabi_test

import (
	"encoding/binary"
	"errors"
	"testing"

	. "github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/host/internal/cabi/cabitest"
)

// fuzzTypes covers every constructor, nested.
var fuzzTypes = []*Type{
	String,
	List(U8),
	List(String),
	Char,
	sampleType,
	Option(List(Record("kv", F("k", String), F("v", Option(U64))))),
	Result(List(Record("spec", F("n", String), F("d", String), F("s", String))), String),
	VariantOf("ec", C("a", String), C("b", nil), C("c", U64)),
	List(VariantOf("ev", C("x", Record("", F("e", Option(S32)), F("r", Enum("r", "a", "b")))), C("y", Enum("s", "o", "e")), C("z", nil))),
}

// checkErr fails on anything but a clean ErrABI error.
func checkErr(t *testing.T, err error) {
	if err != nil && !errors.Is(err, ErrABI) {
		t.Fatalf("lift error not ErrABI: %v", err)
	}
}

// FuzzLoad loads every type from arbitrary memory at an arbitrary pointer:
// it must return a value or an ErrABI error, never panic.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("\x08\x00\x00\x00\x02\x00\x00\x00hi"), uint32(0), uint8(0))
	f.Add(make([]byte, 256), uint32(8), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, ptr uint32, which uint8) {
		mem := &cabitest.Memory{B: data}
		_, err := Load(mem, fuzzTypes[int(which)%len(fuzzTypes)], ptr)
		checkErr(t, err)
	})
}

// FuzzLiftFlat lifts every type from arbitrary flat values over arbitrary
// memory.
func FuzzLiftFlat(f *testing.F) {
	f.Add([]byte("hello world"), []byte{0, 0, 0, 0, 5, 0, 0, 0}, uint8(0))
	f.Add(make([]byte, 512), make([]byte, 64), uint8(4))
	f.Fuzz(func(t *testing.T, data, stackBytes []byte, which uint8) {
		mem := &cabitest.Memory{B: data}
		var stack []uint64
		for len(stackBytes) >= 4 {
			stack = append(stack, uint64(binary.LittleEndian.Uint32(stackBytes)))
			stackBytes = stackBytes[4:]
		}
		_, err := LiftFlat(mem, fuzzTypes[int(which)%len(fuzzTypes)], stack)
		checkErr(t, err)
	})
}

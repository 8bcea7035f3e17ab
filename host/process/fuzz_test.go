package process

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/host/internal/cabi/cabitest"
)

// FuzzLiftParams lifts the arguments of every served function from
// arbitrary memory and an arbitrary core stack: a value or an ErrABI
// error, never a panic. (Only lifting: no registry call is made.)
func FuzzLiftParams(f *testing.F) {
	all := append(append([]def(nil), ver10.funcs...), ver11.funcs...)
	seed := make([]byte, 256)
	binary.LittleEndian.PutUint32(seed[0:], 64)
	binary.LittleEndian.PutUint32(seed[4:], 3)
	f.Add(seed, seed[:64], uint8(0))
	f.Add(seed, seed[:8], uint8(11)) // spawn-persistent: params by pointer
	f.Fuzz(func(t *testing.T, memory, stackBytes []byte, which uint8) {
		d := all[int(which)%len(all)]
		var stack []uint64
		for i := 0; i+8 <= len(stackBytes); i += 8 {
			stack = append(stack, binary.LittleEndian.Uint64(stackBytes[i:]))
		}
		if p, _ := d.f.ImportSignature(); len(stack) < len(p) {
			return // the engine always passes the full signature
		}
		_, err := d.f.LiftParams(&cabitest.Memory{B: memory}, stack)
		if err != nil && !errors.Is(err, cabi.ErrABI) {
			t.Fatalf("%s: %v is not ErrABI", d.f.Name, err)
		}
	})
}

// BenchmarkLiftID52 is the Go-level cost of lifting a 52-byte process-id
// argument (status), without an engine.
func BenchmarkLiftID52(b *testing.B) {
	c := cabitest.New(4096, 1024)
	copy(c.Mem.B[64:], "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	var f *cabi.Func
	for _, d := range ver11.funcs {
		if d.f.Name == "status" {
			f = d.f
		}
	}
	stack := []uint64{64, 52, 1024}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.LiftParams(c.Mem, stack); err != nil {
			b.Fatal(err)
		}
	}
}

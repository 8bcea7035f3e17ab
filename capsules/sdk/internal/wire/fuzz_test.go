package wire

import (
	"errors"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
)

// FuzzLiftResult feeds arbitrary host-written bytes (the return area and
// one host allocation) to every result lifter: lifting must never panic,
// and any failure must be ErrInternal or a lifted error-code.
func FuzzLiftResult(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0}, []byte("abcd"), uint8(0))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 13, 0, 0, 0, 0, 0, 0, 0, 9}, []byte{}, uint8(1))
	f.Add(make([]byte, 200), []byte("\xff\xfe"), uint8(5))
	f.Fuzz(func(t *testing.T, ret, heap []byte, which uint8) {
		s := &abi.Scope{}
		defer s.Free()
		s.Enter()
		hp := abi.Realloc(0, 0, 8, uint32(len(heap))+1)
		s.Poke(hp, heap)
		s.Leave()
		// Point any (ptr, len) the fuzzer writes near the allocation.
		type lifter struct {
			ok   *abi.Type
			lift func(*abi.Lifter, []byte, uint32) any
		}
		lifters := []lifter{
			{&LProcessResult, func(l *abi.Lifter, b []byte, o uint32) any { return LiftProcessResult(l, b, o) }},
			{&LReadLogsResult, func(l *abi.Lifter, b []byte, o uint32) any { return LiftReadLogsResult(l, b, o) }},
			{&LLogChunk, func(l *abi.Lifter, b []byte, o uint32) any { return LiftLogChunk(l, b, o) }},
			{&LProcessInfo, func(l *abi.Lifter, b []byte, o uint32) any { return LiftProcessInfo(l, b, o) }},
			{abi.Ptr(abi.List()), func(l *abi.Lifter, b []byte, o uint32) any { return LiftProcessInfos(l, b, o) }},
			{&LEventBatch, func(l *abi.Lifter, b []byte, o uint32) any { return LiftEventBatch(l, b, o) }},
			{&abi.String, func(l *abi.Lifter, b []byte, o uint32) any { return l.String(b, o, "s") }},
		}
		lf := lifters[int(which)%len(lifters)]
		for _, ec := range []struct {
			t     abi.Type
			cases int
		}{{LErrorCode11, 14}, {LErrorCode10, 10}} {
			rt := ResultOf(lf.ok, ec.t)
			buf := make([]byte, rt.Size)
			copy(buf, ret)
			// Rebase small pointer values onto the host allocation so the
			// fuzzer reaches the success paths too.
			for off := uint32(0); off+4 <= rt.Size; off += 4 {
				if v := abi.GetU32(buf, off); v < 64 && v > 0 && off%8 == rt.Payload%8 {
					abi.PutU32(buf, off, hp+v%uint32(len(heap)+1))
				}
			}
			_, err := LiftResult(s, buf, lf.ok, ec.t, ec.cases, lf.lift)
			var pe *Error
			if err != nil && !errors.As(err, &pe) {
				t.Fatalf("lift error %v is not an *Error", err)
			}
			if pe != nil && int(pe.Code) >= ec.cases {
				t.Fatalf("lifted code %d beyond %d cases", pe.Code, ec.cases)
			}
		}
	})
}

//go:build !wasip1

package proccore

import (
	"errors"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/wire"
)

var (
	v10 = &Version{EC: wire.LErrorCode10, Cases: 10}
	v11 = &Version{EC: wire.LErrorCode11, Cases: 14}
)

// answerErr plays the host: it writes the error case code into the
// return area of result<ok, error-code> of version v.
func answerErr(t *testing.T, v *Version, ok *abi.Type, ret uint32, code wire.Code) {
	t.Helper()
	size, align, payload := wire.ResultShape(ok, v.EC)
	if ret%align != 0 {
		t.Fatalf("return area %#x misaligned for %d", ret, align)
	}
	b, found := abi.Current().Load(ret, size)
	if !found {
		t.Fatal("return area is not guest memory of this call")
	}
	b[0] = 1
	b[payload] = byte(code)
}

// The same handle call lifts each version's error-code with that
// version's layout, and lowers option<u64> as discriminant and value.
func TestHandleCallPerVersion(t *testing.T) {
	seven := uint64(7)
	tests := []struct {
		name    string
		v       *Version
		timeout *uint64
		wantD   uint32
		wantMS  uint64
		code    wire.Code
		want    wire.Code
	}{
		{"1.0.0 no timeout", v10, nil, 0, 0, wire.ErrWaitTimeout, wire.ErrWaitTimeout},
		{"1.1.0 timeout", v11, &seven, 1, 7, wire.ErrNoSuchProcess, wire.ErrNoSuchProcess},
		// no-such-process is not a 1.0.0 case: a host sending it is broken.
		{"1.0.0 case out of range", v10, &seven, 1, 7, wire.ErrNoSuchProcess, wire.ErrInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Wait(tc.v, 5, tc.timeout, func(self, d uint32, ms uint64, ret uint32) {
				if self != 5 || d != tc.wantD || ms != tc.wantMS {
					t.Errorf("wait(%d, %d, %d)", self, d, ms)
				}
				answerErr(t, tc.v, &wire.LExitInfo, ret, tc.code)
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSignalAndWriteStdinLowering(t *testing.T) {
	err := Signal(v10, 9, wire.SigInt, func(self, sig, ret uint32) {
		if self != 9 || sig != uint32(wire.SigInt) {
			t.Errorf("signal(%d, %d)", self, sig)
		}
		answerErr(t, v10, nil, ret, wire.ErrClosed)
	})
	if !errors.Is(err, wire.ErrClosed) {
		t.Fatalf("signal: %v", err)
	}
	n, err := WriteStdin(v11, 2, []byte("hi"), func(self, p, l, ret uint32) {
		b, ok := abi.Current().Load(p, l)
		if self != 2 || !ok || string(b) != "hi" {
			t.Errorf("write-stdin(%d, %q)", self, b)
		}
		size, _, payload := wire.ResultShape(&abi.U32, v11.EC)
		r, _ := abi.Current().Load(ret, size)
		abi.PutU32(r, payload, 2)
	})
	if err != nil || n != 2 {
		t.Fatalf("write-stdin = %d, %v", n, err)
	}
}

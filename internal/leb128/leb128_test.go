package leb128

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"testing"
)

func TestUnsigned(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		bits uint
		v    uint64
		n    int
		err  error
	}{
		{"zero", []byte{0x00}, 32, 0, 1, nil},
		{"one byte max", []byte{0x7f}, 32, 127, 1, nil},
		{"two bytes", []byte{0xe5, 0x8e, 0x26}, 32, 624485, 3, nil},
		{"trailing bytes ignored", []byte{0x01, 0xff}, 32, 1, 1, nil},
		{"padded zero", []byte{0x80, 0x80, 0x80, 0x80, 0x00}, 32, 0, 5, nil},
		{"u32 max", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 32, math.MaxUint32, 5, nil},
		{"u32 unused bit", []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, 32, 0, 5, ErrTooLarge},
		{"u32 sixth byte", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 32, 0, 5, ErrTooLong},
		{"u32 unused bit and continuation", []byte{0x80, 0x80, 0x80, 0x80, 0x90, 0x00}, 32, 0, 5, ErrTooLarge},
		{"u64 max", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 64, math.MaxUint64, 10, nil},
		{"u64 unused bit", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 64, 0, 10, ErrTooLarge},
		{"u64 eleventh byte", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 64, 0, 10, ErrTooLong},
		{"u63 needs no unused-bit check", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 63, math.MaxInt64, 9, nil},
		{"u7 continuation", []byte{0x80, 0x00}, 7, 0, 1, ErrTooLong},
		{"u1", []byte{0x01}, 1, 1, 1, nil},
		{"u1 too large", []byte{0x02}, 1, 0, 1, ErrTooLarge},
		{"empty", nil, 32, 0, 0, ErrTruncated},
		{"truncated", []byte{0x80, 0x80}, 32, 0, 2, ErrTruncated},
		{"width over 64 reads as 64", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 70, 0, 10, ErrTooLarge},
	} {
		v, n, err := Unsigned(tc.in, tc.bits)
		if v != tc.v || n != tc.n || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: Unsigned(% x, %d) = %d, %d, %v; want %d, %d, %v", tc.name, tc.in, tc.bits, v, n, err, tc.v, tc.n, tc.err)
		}
	}
}

func TestSigned(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		bits uint
		v    int64
		n    int
		err  error
	}{
		{"zero", []byte{0x00}, 32, 0, 1, nil},
		{"minus one", []byte{0x7f}, 32, -1, 1, nil},
		{"63", []byte{0x3f}, 32, 63, 1, nil},
		{"64 needs two bytes", []byte{0xc0, 0x00}, 32, 64, 2, nil},
		{"-64", []byte{0x40}, 32, -64, 1, nil},
		{"-123456", []byte{0xc0, 0xbb, 0x78}, 32, -123456, 3, nil},
		{"padded minus one", []byte{0xff, 0xff, 0xff, 0xff, 0x7f}, 32, -1, 5, nil},
		{"s32 max", []byte{0xff, 0xff, 0xff, 0xff, 0x07}, 32, math.MaxInt32, 5, nil},
		{"s32 min", []byte{0x80, 0x80, 0x80, 0x80, 0x78}, 32, math.MinInt32, 5, nil},
		{"s32 positive with unused bit", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 32, 0, 5, ErrTooLarge},
		{"s32 negative with clear unused bit", []byte{0x80, 0x80, 0x80, 0x80, 0x70}, 32, 0, 5, ErrTooLarge},
		{"s32 sixth byte", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 32, 0, 5, ErrTooLong},
		{"s33 max type index", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 33, math.MaxUint32, 5, nil},
		{"s33 min", []byte{0x80, 0x80, 0x80, 0x80, 0x70}, 33, -1 << 32, 5, nil},
		{"s33 2^32", []byte{0x80, 0x80, 0x80, 0x80, 0x10}, 33, 0, 5, ErrTooLarge},
		{"s33 bit 33 without sign", []byte{0x80, 0x80, 0x80, 0x80, 0x20}, 33, 0, 5, ErrTooLarge},
		{"s33 primitive code", []byte{0x7f}, 33, -1, 1, nil},
		{"s64 min", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}, 64, math.MinInt64, 10, nil},
		{"s64 max", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}, 64, math.MaxInt64, 10, nil},
		{"s64 tenth byte not sign", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 64, 0, 10, ErrTooLarge},
		{"s64 eleventh byte", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 64, 0, 10, ErrTooLong},
		{"s7 range", []byte{0x40}, 7, -64, 1, nil},
		{"s7 continuation", []byte{0xc0, 0x7f}, 7, 0, 1, ErrTooLong},
		{"s1 minus one", []byte{0x7f}, 1, -1, 1, nil},
		{"s1 one is too large", []byte{0x01}, 1, 0, 1, ErrTooLarge},
		{"empty", nil, 33, 0, 0, ErrTruncated},
		{"truncated", []byte{0xff}, 33, 0, 1, ErrTruncated},
	} {
		v, n, err := Signed(tc.in, tc.bits)
		if v != tc.v || n != tc.n || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: Signed(% x, %d) = %d, %d, %v; want %d, %d, %v", tc.name, tc.in, tc.bits, v, n, err, tc.v, tc.n, tc.err)
		}
	}
}

func TestAppend(t *testing.T) {
	for _, tc := range []struct {
		u    uint64
		want []byte
	}{
		{0, []byte{0x00}},
		{127, []byte{0x7f}},
		{128, []byte{0x80, 0x01}},
		{624485, []byte{0xe5, 0x8e, 0x26}},
		{math.MaxUint64, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		if got := AppendUnsigned([]byte{0xaa}, tc.u); !bytes.Equal(got, append([]byte{0xaa}, tc.want...)) {
			t.Errorf("AppendUnsigned(%d) = % x, want aa % x", tc.u, got, tc.want)
		}
	}
	for _, tc := range []struct {
		s    int64
		want []byte
	}{
		{0, []byte{0x00}},
		{-1, []byte{0x7f}},
		{63, []byte{0x3f}},
		{64, []byte{0xc0, 0x00}},
		{-64, []byte{0x40}},
		{-65, []byte{0xbf, 0x7f}},
		{-123456, []byte{0xc0, 0xbb, 0x78}},
		{math.MinInt64, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}},
	} {
		if got := AppendSigned([]byte{0xaa}, tc.s); !bytes.Equal(got, append([]byte{0xaa}, tc.want...)) {
			t.Errorf("AppendSigned(%d) = % x, want aa % x", tc.s, got, tc.want)
		}
	}
}

// refDecode is the reference the fuzz target holds the decoders to,
// written from the spec's other reading: take at most ceil(bits/7)
// bytes, then the value of all their 7-bit groups must lie in the range
// of the width (too large), and only then may the last byte not end the
// integer (too long).
func refDecode(b []byte, bits uint, signed bool) (*big.Int, int, error) {
	limit := int(bits+6) / 7
	k := 0
	for {
		if k >= len(b) {
			return nil, len(b), ErrTruncated
		}
		k++
		if b[k-1]&0x80 == 0 || k == limit {
			break
		}
	}
	v := new(big.Int)
	for i := k - 1; i >= 0; i-- {
		v.Lsh(v, 7).Or(v, big.NewInt(int64(b[i]&0x7f)))
	}
	lo, hi := big.NewInt(0), new(big.Int).Lsh(big.NewInt(1), bits) // [lo, hi)
	if signed {
		if v.Bit(7*k-1) == 1 { // negative in 7k-bit two's complement
			v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(7*k)))
		}
		hi.Rsh(hi, 1)
		lo.Neg(hi)
	}
	if v.Cmp(lo) < 0 || v.Cmp(hi) >= 0 {
		return nil, k, ErrTooLarge
	}
	if b[k-1]&0x80 != 0 {
		return nil, k, ErrTooLong
	}
	return v, k, nil
}

// FuzzRoundTrip: the decoders agree with refDecode on any input and
// width, and every value of a width survives encode then decode at its
// shortest length.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, uint8(31), int64(-1))
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x10}, uint8(32), int64(1)<<32)
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}, uint8(63), int64(math.MinInt64))
	f.Add([]byte{0xc0, 0xbb, 0x78}, uint8(6), int64(-123456))
	f.Fuzz(func(t *testing.T, in []byte, w uint8, x int64) {
		bits := 1 + uint(w)%64
		u, n, err := Unsigned(in, bits)
		rv, rn, rerr := refDecode(in, bits, false)
		if n != rn || err != rerr || (err == nil && (!rv.IsUint64() || rv.Uint64() != u)) {
			t.Fatalf("Unsigned(% x, %d) = %d, %d, %v; reference %v, %d, %v", in, bits, u, n, err, rv, rn, rerr)
		}
		s, n, err := Signed(in, bits)
		rv, rn, rerr = refDecode(in, bits, true)
		if n != rn || err != rerr || (err == nil && (!rv.IsInt64() || rv.Int64() != s)) {
			t.Fatalf("Signed(% x, %d) = %d, %d, %v; reference %v, %d, %v", in, bits, s, n, err, rv, rn, rerr)
		}

		prefix := []byte{0xaa}
		uv := uint64(x) & (math.MaxUint64 >> (64 - bits))
		enc := AppendUnsigned(prefix, uv)
		if got, n, err := Unsigned(enc[1:], bits); err != nil || got != uv || n != len(enc)-1 || n != shortest(big.NewInt(0).SetUint64(uv), false) {
			t.Fatalf("Unsigned(AppendUnsigned(%d) = % x, %d) = %d, %d, %v", uv, enc, bits, got, n, err)
		}
		sv := x << (64 - bits) >> (64 - bits) // x cut to the width, sign-extended
		enc = AppendSigned(prefix, sv)
		if got, n, err := Signed(enc[1:], bits); err != nil || got != sv || n != len(enc)-1 || n != shortest(big.NewInt(sv), true) {
			t.Fatalf("Signed(AppendSigned(%d) = % x, %d) = %d, %d, %v", sv, enc, bits, got, n, err)
		}
	})
}

// shortest is the fewest bytes that hold v: 7 value bits a byte, one of
// them the sign bit when signed.
func shortest(v *big.Int, signed bool) int {
	need := v.BitLen()
	if signed {
		if v.Sign() < 0 {
			need = new(big.Int).Not(v).BitLen()
		}
		need++
	}
	return max(1, (need+6)/7)
}

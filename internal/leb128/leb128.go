// Package leb128 decodes and encodes the variable-length integers of the
// WebAssembly binary format (LEB128) with the spec's limits for an N-bit
// integer: at most ceil(N/7) bytes, and the unused bits of the last byte
// zero (unsigned) or copies of the sign bit (signed). The component,
// core-module and adapter readers share this one arithmetic and keep
// their own error types.
package leb128

import "errors"

// The errors a decoder returns; each names the spec rule the input breaks.
var (
	// ErrTruncated: the input ends before the last byte (continuation
	// bit clear) of the integer.
	ErrTruncated = errors.New("leb128: truncated")
	// ErrTooLong: the byte that may be the last one for the bit width
	// has its continuation bit set ("integer representation too long").
	ErrTooLong = errors.New("leb128: integer representation too long")
	// ErrTooLarge: the unused bits of the last byte are not zero
	// (unsigned) or not the sign extension (signed): the value does not
	// fit in the bit width ("integer too large").
	ErrTooLarge = errors.New("leb128: integer too large")
)

// width is bits as the decoders use it: 1 to 64 (0 or a wider request reads
// as 64, the widest value the results hold).
func width(bits uint) uint {
	if bits == 0 || bits > 64 {
		return 64
	}
	return bits
}

// Unsigned decodes an unsigned integer of at most bits bits (1 to 64)
// from the start of b. It returns the value and the bytes it took; on an
// error, n counts the bytes read up to and including the one at fault
// (len(b) when truncated).
func Unsigned(b []byte, bits uint) (v uint64, n int, err error) {
	return decode(b, width(bits), false)
}

// Signed decodes a two's-complement integer of at most bits bits (1 to
// 64) from the start of b, sign-extended to 64 bits; n as for Unsigned.
func Signed(b []byte, bits uint) (v int64, n int, err error) {
	u, n, err := decode(b, width(bits), true)
	return int64(u), n, err
}

func decode(b []byte, bits uint, signed bool) (uint64, int, error) {
	var v uint64
	for i, shift := 0, uint(0); ; i, shift = i+1, shift+7 {
		if i >= len(b) {
			return 0, len(b), ErrTruncated
		}
		c := b[i]
		if left := bits - shift; left <= 7 { // the last byte the width allows
			if !fits(c&0x7f, left, signed) {
				return 0, i + 1, ErrTooLarge
			}
			if c&0x80 != 0 {
				return 0, i + 1, ErrTooLong
			}
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			if signed && shift+7 < 64 && c&0x40 != 0 {
				v |= ^uint64(0) << (shift + 7)
			}
			return v, i + 1, nil
		}
	}
}

// fits reports whether the 7 value bits g of a last byte that holds the
// top left bits of the integer leave the rest unused: zero, or when
// signed equal to the sign bit (bit left-1).
func fits(g byte, left uint, signed bool) bool {
	if !signed {
		return g>>left == 0
	}
	hi := g >> (left - 1)
	return hi == 0 || hi == 0x7f>>(left-1)
}

// AppendUnsigned appends the shortest encoding of v.
func AppendUnsigned(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// AppendSigned appends the shortest encoding of v.
func AppendSigned(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

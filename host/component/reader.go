package component

import (
	"unicode/utf8"
)

// reader decodes one section. The first error sticks: later reads return
// zero values, so decoders check r.err once per item, not per field.
type reader struct {
	b       []byte
	pos     int
	base    int // offset of b[0] in the outermost binary
	section string
	err     *Error
}

func (r *reader) off() int { return r.base + r.pos }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = malformed(r.section, r.off(), format, args...)
	}
}

func (r *reader) refuse(construct, hint string) {
	if r.err == nil {
		r.err = unsupported(r.section, r.off(), construct, hint)
	}
}

func (r *reader) done() bool { return r.err != nil || r.pos >= len(r.b) }

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.fail("unexpected end of section")
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *reader) peek() byte {
	if r.err != nil || r.pos >= len(r.b) {
		r.fail("unexpected end of section")
		return 0
	}
	return r.b[r.pos]
}

// leb reads an unsigned LEB128 of at most bits bits.
func (r *reader) leb(bits uint) uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift >= bits || (shift+7 > bits && uint64(c&0x7f)>>(bits-shift) != 0) {
			r.fail("integer too large for %d bits", bits)
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) u32() uint32 { return uint32(r.leb(32)) }

// s33 reads a signed 33-bit LEB128 (a type index or a negative type code).
func (r *reader) s33() int64 {
	var v int64
	var shift uint
	for {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift >= 33 {
			r.fail("s33 too long")
			return 0
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// count reads a vector length and refuses one that cannot fit in the rest
// of the section (each element takes at least min bytes), so a hostile
// count never drives an allocation.
func (r *reader) count(min int) int {
	n := r.u32()
	if r.err != nil {
		return 0
	}
	if rest := len(r.b) - r.pos; uint64(n)*uint64(min) > uint64(rest) {
		r.fail("count %d exceeds the %d bytes left in the section", n, rest)
		return 0
	}
	return int(n)
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.pos {
		r.fail("length %d exceeds the %d bytes left in the section", n, len(r.b)-r.pos)
		return nil
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b
}

func (r *reader) name() string {
	b := r.bytes(r.count(1))
	if r.err == nil && !utf8.Valid(b) {
		r.fail("name is not valid UTF-8")
		return ""
	}
	return string(b)
}

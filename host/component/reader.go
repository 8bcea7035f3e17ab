package component

import (
	"errors"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/internal/leb128"
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
	if r.err != nil {
		return 0
	}
	v, n, err := leb128.Unsigned(r.b[r.pos:], bits)
	r.pos += n
	if err != nil {
		r.lebFail(err, "integer too large for %d bits", bits)
	}
	return v
}

func (r *reader) u32() uint32 { return uint32(r.leb(32)) }

// s33 reads a signed 33-bit LEB128 (a type index or a negative type code).
func (r *reader) s33() int64 {
	if r.err != nil {
		return 0
	}
	v, n, err := leb128.Signed(r.b[r.pos:], 33)
	r.pos += n
	switch {
	case errors.Is(err, leb128.ErrTooLarge): // the last byte's unused bits are not the sign's
		r.fail("s33 out of range")
	case err != nil:
		r.lebFail(err, "s33 too long")
	}
	return v
}

// lebFail records a leb128 error after the byte at fault: the end of the
// section, or the reader's message for an encoding the width refuses.
func (r *reader) lebFail(err error, format string, args ...any) {
	if errors.Is(err, leb128.ErrTruncated) {
		r.fail("unexpected end of section")
		return
	}
	r.fail(format, args...)
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

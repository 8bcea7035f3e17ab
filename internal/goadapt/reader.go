package goadapt

import (
	"errors"
	"fmt"

	"github.com/capsule-host/capsule-host/internal/leb128"
)

// The errors Inject returns wrap one of these (errors.Is).
var (
	// ErrMalformed: the input is not a well-formed core wasm module.
	ErrMalformed = errors.New("malformed core module")
	// ErrUnsupported: well-formed, but not a module the tool can adapt
	// (a section it needs is missing, an encoding it does not handle).
	ErrUnsupported = errors.New("unsupported core module")
	// ErrNoArena: the module carries no SDK adapter arena descriptor
	// (not built with capsules/sdk), or a damaged one.
	ErrNoArena = errors.New("no adapter arena")
	// ErrAdapted: the module already exports cabi_realloc_adapter.
	ErrAdapted = errors.New("already adapted")
)

// Error says what was wrong and where (a byte offset into the input).
type Error struct {
	Section string // "header", "type", "code", "name", ...
	Offset  int
	Reason  string
	kind    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("goadapt: %s section at offset %d: %s", e.Section, e.Offset, e.Reason)
}

func (e *Error) Unwrap() error { return e.kind }

// reader reads the core binary format's primitives from b[pos:end),
// recording the first error; later reads return zero values.
type reader struct {
	b        []byte
	pos      int
	end      int
	section  string
	err      *Error
	mapStart int // nameMap: where the entries begin
}

func newReader(b []byte, start, end int, section string) *reader {
	return &reader{b: b, pos: start, end: end, section: section}
}

func (r *reader) fail(kind error, format string, args ...any) {
	if r.err == nil {
		r.err = &Error{Section: r.section, Offset: r.pos, Reason: fmt.Sprintf(format, args...), kind: kind}
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= r.end {
		r.fail(ErrMalformed, "unexpected end")
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.end-r.pos {
		r.fail(ErrMalformed, "%d bytes declared, %d left", n, r.end-r.pos)
		return nil
	}
	s := r.b[r.pos : r.pos+n]
	r.pos += n
	return s
}

// uleb reads an unsigned LEB128 of at most bits bits.
func (r *reader) uleb(bits uint) uint64 {
	return readLEB(r, leb128.Unsigned, bits, "LEB128 integer too long for %d bits")
}

func (r *reader) u32() uint32 { return uint32(r.uleb(32)) }

// sleb reads a signed LEB128 of at most bits bits (the value is not
// needed, only its extent, except for i32.const offsets).
func (r *reader) sleb(bits uint) int64 {
	return readLEB(r, leb128.Signed, bits, "signed LEB128 integer too long for %d bits")
}

// readLEB decodes one integer at pos with a leb128 decoder and records
// its error after the byte at fault: the end of the bytes, or tooLong
// (formatted with bits) for an encoding the width refuses.
func readLEB[T uint64 | int64](r *reader, decode func([]byte, uint) (T, int, error), bits uint, tooLong string) T {
	if r.err != nil {
		return 0
	}
	v, n, err := decode(r.b[r.pos:r.end], bits)
	r.pos += n
	switch {
	case err == nil:
	case errors.Is(err, leb128.ErrTruncated):
		r.fail(ErrMalformed, "unexpected end")
	default:
		r.fail(ErrMalformed, tooLong, bits)
	}
	return v
}

// count reads a vector length, refusing one that cannot fit in the
// bytes left (each element is at least min bytes), so a hostile count
// allocates nothing.
func (r *reader) count(min int) int {
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(min) > uint64(r.end-r.pos) {
		r.fail(ErrMalformed, "count %d does not fit in the %d bytes left", n, r.end-r.pos)
		return 0
	}
	return int(n)
}

func (r *reader) name() string {
	n := r.u32()
	return string(r.bytes(int(n)))
}

// done fails unless the section was read exactly to its end.
func (r *reader) done() {
	if r.err == nil && r.pos != r.end {
		r.fail(ErrMalformed, "%d bytes left over at the end", r.end-r.pos)
	}
}

func appendULEB(b []byte, v uint64) []byte { return leb128.AppendUnsigned(b, v) }

func appendSLEB(b []byte, v int64) []byte { return leb128.AppendSigned(b, v) }

// nameMap reads a name map, checking its indices ascend below limit; it
// returns the count and leaves mapStart at the first entry.
func (r *reader) nameMap(limit uint32) int {
	n := r.count(2)
	r.mapStart = r.pos
	prev := int64(-1)
	for i := 0; i < n && r.err == nil; i++ {
		idx := r.u32()
		r.name()
		if r.err == nil && (int64(idx) <= prev || idx >= limit) {
			r.fail(ErrMalformed, "name map index %d out of order or beyond %d", idx, limit)
		}
		prev = int64(idx)
	}
	return n
}

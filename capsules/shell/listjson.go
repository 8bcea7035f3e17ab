package main

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// The list_processes answer is encoded by hand: encoding/json's
// reflection took most of the guest's share of a list (500 processes,
// about 10 fields each), where appending to one buffer costs no
// allocation per record. The output is byte for byte what
// json.Marshal(map[string]any{"processes": out}) writes
// (TestListJSONMatchesEncodingJSON, FuzzListJSON), HTML-safe escapes
// included, so the schema agents see does not move.

// appendList appends {"processes":[...]} for ps.
func appendList(b []byte, ps []procOut) []byte {
	b = append(b, `{"processes":[`...)
	for i := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendProc(b, &ps[i])
	}
	return append(b, "]}"...)
}

// appendProc appends one entry, its fields in procOut's order. It is
// written for few branches and calls: in the guest each costs the
// engine's termination check, and this runs once per process.
func appendProc(b []byte, p *procOut) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, p.ID)
	b = append(b, `,"label":`...)
	b = appendString(b, p.Label)
	b = append(b, `,"command":`...)
	b = appendString(b, p.Command)
	if p.Running {
		b = append(b, `,"running":true`...)
	} else {
		b = append(b, `,"running":false`...)
	}
	if e := p.Exit; e != nil {
		b = appendExit(b, e)
	}
	b = append(b, `,"age_ms":`...)
	b = appendUint(b, p.AgeMS)
	b = append(b, `,"idle_ms":`...)
	b = appendUint(b, p.IdleMS)
	if p.StdinOpen {
		b = append(b, `,"stdin_open":true,"buffered_bytes":`...)
	} else {
		b = append(b, `,"stdin_open":false,"buffered_bytes":`...)
	}
	b = appendUint(b, p.Buffered)
	b = append(b, `,"bytes_dropped":`...)
	b = appendUint(b, p.Dropped)
	return append(b, '}')
}

// appendExit appends ,"exit":{...}.
func appendExit(b []byte, e *exitOut) []byte {
	b = append(b, `,"exit":{`...)
	n := len(b)
	if e.ExitCode != nil {
		b = append(b, `"exit_code":`...)
		b = strconv.AppendInt(b, int64(*e.ExitCode), 10)
	}
	if e.Signal != nil {
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(b, `"signal":`...)
		b = strconv.AppendInt(b, int64(*e.Signal), 10)
	}
	if e.Reason != "" {
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(b, `"reason":`...)
		b = appendString(b, e.Reason)
	}
	return append(b, '}')
}

// appendUint is strconv.AppendUint(b, v, 10) without its general
// bases: two digits a step from a table.
func appendUint(b []byte, v uint64) []byte {
	var a [20]byte
	i := len(a)
	for v >= 100 {
		q := v / 100
		r := (v - q*100) * 2
		i -= 2
		a[i], a[i+1] = digitPairs[r], digitPairs[r+1]
		v = q
	}
	if v >= 10 {
		i -= 2
		a[i], a[i+1] = digitPairs[v*2], digitPairs[v*2+1]
	} else {
		i--
		a[i] = byte('0' + v)
	}
	return append(b, a[i:]...)
}

const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json does
// with HTML escaping: ", \ and the short control escapes by name, other
// control bytes and <, >, & as \u00XX, U+2028 and U+2029 as \u2028 and
// \u2029, and each byte of invalid UTF-8 as \ufffd. A string that needs
// none of that (IDs, labels, commands nearly always) is copied whole.
func appendString(b []byte, s string) []byte {
	if plain(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	return appendEscaped(b, s)
}

// plain reports whether s is printable ASCII without ", \, <, > or &: a
// JSON string as it is. It tests 8 bytes a step (and an overlapping last
// word), never one byte at a time: in the guest every loop iteration
// pays the engine's termination check, and the byte loop below was most
// of a 500-process list's encoding.
func plain(s string) bool {
	n := len(s)
	if n < 8 {
		w := [8]byte{'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'}
		copy(w[:], s)
		return special(binary.LittleEndian.Uint64(w[:])) == 0
	}
	var acc uint64
	for i := 0; i+8 <= n; i += 8 {
		acc |= special(le64(s[i:]))
	}
	return acc|special(le64(s[n-8:])) == 0
}

// le64 reads s[0:8] as a little-endian word.
func le64(s string) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s), 8))
}

// special has the high bit set in each byte of w that appendEscaped would
// not copy as it is: a control byte, ", \, <, >, & or any byte ≥ 0x80.
// (Per byte: x < n is (x - n) &^ x & 0x80 for x < 0x80; x == c is x^c == 0.)
func special(w uint64) uint64 {
	return (w | (w-0x20*ones)&^w | zero(w^'"'*ones) | zero(w^'\\'*ones) |
		zero(w^'<'*ones) | zero(w^'>'*ones) | zero(w^'&'*ones)) & highs
}

const ones, highs = 0x0101010101010101, 0x8080808080808080

// zero has the high bit set in the bytes of x that are 0 (exact for the
// word as a whole, which is all special needs).
func zero(x uint64) uint64 { return (x - ones) &^ x }

// appendEscaped is appendString for a string that needs escapes.
func appendEscaped(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += n
			continue
		}
		i += n
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

package sandbox

import "unicode/utf8"

// SplitUTF8 splits b into a prefix that can be rendered as text now and a
// tail of at most 3 bytes that is the start of a multi-byte UTF-8 sequence
// still waiting for its continuation bytes (from the next chunk). Carry
// rest over to the front of the next chunk; at EOF render it as is.
// Invalid bytes are not held back (they render as U+FFFD whatever comes
// next), so rest is only ever an incomplete but so-far-valid rune.
func SplitUTF8(b []byte) (complete, rest []byte) {
	// Look at most 3 bytes back for the start of the last rune.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		c := b[i]
		if c < utf8.RuneSelf {
			return b, nil // ASCII: everything complete
		}
		if !utf8.RuneStart(c) {
			continue // continuation byte: keep looking for the start
		}
		need := 0
		switch {
		case c&0xE0 == 0xC0:
			need = 2
		case c&0xF0 == 0xE0:
			need = 3
		case c&0xF8 == 0xF0:
			need = 4
		default:
			return b, nil // invalid start byte
		}
		have := len(b) - i
		if have >= need {
			return b, nil
		}
		if !utf8.FullRune(b[i:]) && validPrefix(b[i:]) {
			return b[:i], b[i:]
		}
		return b, nil
	}
	return b, nil
}

// validPrefix reports whether p (shorter than its rune) could still become
// a valid rune, so holding it back is worth it.
func validPrefix(p []byte) bool {
	var buf [utf8.UTFMax]byte
	n := copy(buf[:], p)
	// Complete with the smallest continuation byte; if the result decodes,
	// some completion exists (second-byte ranges exclude overlongs and
	// surrogates, so try the whole 0x80..0xBF range for the second byte).
	for c2 := 0x80; c2 <= 0xBF; c2++ {
		if n == 1 {
			buf[1] = byte(c2)
		} else if byte(c2) != buf[1] {
			continue
		}
		for i := max(n, 2); i < utf8.UTFMax; i++ {
			buf[i] = 0x80
		}
		r, size := utf8.DecodeRune(buf[:])
		if r != utf8.RuneError && size > n {
			return true
		}
	}
	return false
}

// UTF8Lead is how many leading bytes of b (at most 3) are continuation
// bytes: a read that starts mid-rune (after a drop, or at an arbitrary
// offset) can skip them to render cleanly and report them as skipped.
func UTF8Lead(b []byte) int {
	n := 0
	for n < len(b) && n < utf8.UTFMax-1 && !utf8.RuneStart(b[n]) {
		n++
	}
	return n
}

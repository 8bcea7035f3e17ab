package main

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// cursor is the position read_process_logs hands back, in the one cursor
// format of capsule-host: a stream's cursor is the host's read-since
// cursor itself, the same token the HTTP API's logs return as "next" and
// `capsule-host logs --cursor` takes. Reading both streams, it is the two
// joined by a dot, "OUT.ERR" (host cursors are base32: never a dot), and
// either half may be empty (that stream from its start). A read that
// would end inside a UTF-8 character stops before it, so text is never
// cut inside a character and no byte is skipped or repeated.
type cursor struct {
	Out, Err string
}

// String is the cursor for the streams read.
func (c cursor) String(stdout, stderr bool) string {
	switch {
	case stdout && stderr:
		return c.Out + "." + c.Err
	case stderr:
		return c.Err
	}
	return c.Out
}

var errCursor = errors.New("cursor is not one this tool or the logs API returned (pass back the \"cursor\" field unchanged, or omit it to read from the start)")

// parseCursor reads a cursor for the streams asked: "OUT.ERR", or one
// stream's host cursor when one is read. The host checks each token.
func parseCursor(s string, stdout, stderr bool) (cursor, error) {
	var c cursor
	out, errPart, pair := strings.Cut(s, ".")
	switch {
	case s == "":
	case pair && strings.Contains(errPart, "."):
		return c, errCursor
	case pair:
		c.Out, c.Err = out, errPart
	case stdout && stderr:
		return c, fmt.Errorf("%w: reading both streams takes \"OUT.ERR\" (a single stream's cursor needs \"stream\")", errCursor)
	case stderr:
		c.Err = s
	default:
		c.Out = s
	}
	for _, tok := range []string{c.Out, c.Err} {
		for _, r := range tok {
			if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
				return cursor{}, errCursor
			}
		}
	}
	return c, nil
}

// splitUTF8 returns the text of data up to its last complete UTF-8
// sequence and the incomplete tail. At the end of a stream (eof) nothing
// is held back. Invalid bytes elsewhere become U+FFFD.
func splitUTF8(data []byte, eof bool) (string, []byte) {
	cut := len(data)
	if !eof {
		// Look back at most 3 bytes for the start of a sequence that does
		// not complete within data.
		for i := len(data) - 1; i >= 0 && i >= len(data)-3; i-- {
			b := data[i]
			if b < 0x80 {
				break // ASCII: complete
			}
			if utf8.RuneStart(b) {
				if !utf8.FullRune(data[i:]) {
					cut = i
				}
				break
			}
		}
	}
	text := data[:cut]
	tail := append([]byte(nil), data[cut:]...)
	if utf8.Valid(text) {
		return string(text), tail
	}
	return toValid(text), tail
}

func toValid(b []byte) string {
	out := make([]rune, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		out = append(out, r) // RuneError for invalid bytes
		b = b[n:]
	}
	return string(out)
}

package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// cursor is the opaque position read_process_logs hands back: the host's
// log cursor of each stream, plus the bytes of a UTF-8 sequence that a
// read split at its end (at most 3), which the next read prepends. So text
// is never cut inside a character and no byte is skipped or repeated.
type cursor struct {
	Out     string `json:"o,omitempty"`
	OutTail []byte `json:"ot,omitempty"`
	Err     string `json:"e,omitempty"`
	ErrTail []byte `json:"et,omitempty"`
}

func (c cursor) String() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

var errCursor = errors.New("cursor is not one this tool returned (pass back the \"cursor\" field unchanged, or omit it to read from the start)")

func parseCursor(s string) (cursor, error) {
	var c cursor
	if s == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, errCursor
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.OutTail) > 3 || len(c.ErrTail) > 3 {
		return c, errCursor
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

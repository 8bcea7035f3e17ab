package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitUTF8(t *testing.T) {
	tests := []struct {
		in   string
		eof  bool
		text string
		tail string
	}{
		{"hello", false, "hello", ""},
		{"h\xc3\xa9", false, "hé", ""},
		{"h\xc3", false, "h", "\xc3"},
		{"h\xe2\x82", false, "h", "\xe2\x82"},
		{"h\xf0\x9f\x98", false, "h", "\xf0\x9f\x98"},
		{"h\xf0\x9f\x98\x80", false, "h😀", ""},
		{"h\xc3", true, "h\uFFFD", ""},
		{"a\xffb", false, "a\uFFFDb", ""},
		{"", false, "", ""},
	}
	for _, tt := range tests {
		text, tail := splitUTF8([]byte(tt.in), tt.eof)
		if text != tt.text || string(tail) != tt.tail {
			t.Errorf("splitUTF8(%q, %v) = %q, %q; want %q, %q", tt.in, tt.eof, text, tail, tt.text, tt.tail)
		}
	}
}

// Reading a UTF-8 text in arbitrary chunks through the cursor's tail
// yields the text exactly.
func TestSplitUTF8Chunks(t *testing.T) {
	src := []byte(strings.Repeat("añ€😀z", 50))
	for size := 1; size <= 7; size++ {
		var got strings.Builder
		var tail []byte
		for off := 0; off < len(src); off += size {
			end := min(off+size, len(src))
			text, rest := splitUTF8(append(tail, src[off:end]...), end == len(src))
			if !utf8.ValidString(text) {
				t.Fatalf("chunk %d: invalid text", size)
			}
			got.WriteString(text)
			tail = rest
		}
		if got.String() != string(src) {
			t.Errorf("chunk size %d: text differs", size)
		}
	}
}

// The one cursor format: a stream's cursor is the host's token as is
// (the logs API's "next"); both streams are "OUT.ERR".
func TestCursorFormat(t *testing.T) {
	const o, e = "aeaaaaaaaaaaaaakgraez3cl5i3fjmzrx6xq4vdykq", "aeaaaaaaaaaaaaaaj2fapscfwe35etsutgfctwnx2q"
	c := cursor{Out: o, Err: e}
	if c.String(true, true) != o+"."+e || c.String(true, false) != o || c.String(false, true) != e {
		t.Errorf("String: %q %q %q", c.String(true, true), c.String(true, false), c.String(false, true))
	}
	tests := []struct {
		in             string
		stdout, stderr bool
		want           cursor
	}{
		{"", true, true, cursor{}},
		{o + "." + e, true, true, c},
		{o + ".", true, true, cursor{Out: o}},
		{"." + e, true, true, cursor{Err: e}},
		{o, true, false, cursor{Out: o}},
		{e, false, true, cursor{Err: e}},
		{o + "." + e, false, true, c}, // a pair read for one stream: its half
	}
	for _, tt := range tests {
		got, err := parseCursor(tt.in, tt.stdout, tt.stderr)
		if err != nil || got != tt.want {
			t.Errorf("parseCursor(%q, %v, %v) = %+v, %v; want %+v", tt.in, tt.stdout, tt.stderr, got, err, tt.want)
		}
	}
	for _, bad := range []string{o, "a.b.c", "ABC", "e30x!", o + "=." + e} {
		if _, err := parseCursor(bad, true, true); err == nil {
			t.Errorf("parseCursor(%q) for both streams accepted", bad)
		}
	}
}

func TestLabelFor(t *testing.T) {
	if l := labelFor("echo\thi\nthere"); l != "echo hi there" {
		t.Errorf("label %q", l)
	}
	long := labelFor(strings.Repeat("é", 200))
	if len(long) > maxLabelBytes || !strings.HasSuffix(long, "...") || !utf8.ValidString(long) {
		t.Errorf("long label %d bytes %q", len(long), long)
	}
}

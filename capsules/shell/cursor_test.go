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

func TestCursorRoundTrip(t *testing.T) {
	c := cursor{Out: "abc", OutTail: []byte{0xe2, 0x82}, Err: "x"}
	got, err := parseCursor(c.String())
	if err != nil || got.Out != "abc" || string(got.OutTail) != "\xe2\x82" || got.Err != "x" {
		t.Errorf("round trip = %+v, %v", got, err)
	}
	for _, bad := range []string{"!!", "e30x", cursor{OutTail: []byte("abcd")}.String()} {
		if _, err := parseCursor(bad); err == nil {
			t.Errorf("parseCursor(%q) accepted", bad)
		}
	}
	if c, err := parseCursor(""); err != nil || c.Out != "" {
		t.Error("empty cursor must mean the start")
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

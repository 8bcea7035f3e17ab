package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func i32(v int32) *int32 { return &v }

// listCases covers every field, both exit forms, the omitted exit, an
// empty list, and strings that need each of encoding/json's escapes.
var listCases = []struct {
	name string
	ps   []procOut
}{
	{"empty", []procOut{}},
	{"running", []procOut{{ID: "abc", Label: "s1", Command: "/bin/sh", Running: true, AgeMS: 12, IdleMS: 3, StdinOpen: true, Buffered: 5, Dropped: 1 << 40}}},
	{"exited code", []procOut{{ID: "x", Exit: &exitOut{ExitCode: i32(-7), Reason: "self-exit"}}}},
	{"exited signal", []procOut{{ID: "y", Exit: &exitOut{Signal: i32(9), Reason: "killed"}}}},
	{"exit without reason", []procOut{{ID: "z", Exit: &exitOut{ExitCode: i32(0)}}}},
	{"exit empty", []procOut{{ID: "w", Exit: &exitOut{}}}},
	{"escapes", []procOut{{ID: "q\"\\/", Label: "<a href='x'>&amp;</a>", Command: "\x00\x01\b\f\n\r\t\x1f\x7f"}}},
	{"unicode", []procOut{{Label: "naïve ☃ 𝄞 \u2028\u2029", Command: "bad \xff\xfe utf8 \xe2\x82"}}},
	{"max", []procOut{{AgeMS: ^uint64(0), IdleMS: ^uint64(0), Buffered: ^uint64(0), Dropped: ^uint64(0), Exit: &exitOut{ExitCode: i32(-1 << 31), Signal: i32(1<<31 - 1)}}}},
	{"several", []procOut{{ID: "a", Running: true}, {ID: "b"}, {ID: "c", Exit: &exitOut{Signal: i32(15), Reason: "stopped"}}}},
}

// TestListJSONMatchesEncodingJSON: the hand-written list encoding is
// byte for byte what encoding/json writes for the same values.
func TestListJSONMatchesEncodingJSON(t *testing.T) {
	for _, tc := range listCases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(map[string]any{"processes": tc.ps})
			if err != nil {
				t.Fatal(err)
			}
			if got := appendList(nil, tc.ps); !bytes.Equal(got, want) {
				t.Fatalf("hand-written:\n%s\nencoding/json:\n%s", got, want)
			}
		})
	}
}

// FuzzListJSON: for any strings and numbers, the encoding equals
// encoding/json's and is valid JSON.
func FuzzListJSON(f *testing.F) {
	for _, tc := range listCases {
		for _, p := range tc.ps {
			code, sig, reason, hasExit := int32(0), int32(0), "", p.Exit != nil
			if hasExit {
				reason = p.Exit.Reason
				if p.Exit.ExitCode != nil {
					code = *p.Exit.ExitCode
				}
				if p.Exit.Signal != nil {
					sig = *p.Exit.Signal
				}
			}
			f.Add(p.ID, p.Label, p.Command, reason, p.AgeMS, p.Buffered, code, sig, hasExit, p.Running)
		}
	}
	f.Fuzz(func(t *testing.T, id, label, command, reason string, age, buffered uint64, code, sig int32, hasExit, running bool) {
		p := procOut{ID: id, Label: label, Command: command, Running: running, AgeMS: age, IdleMS: age / 3, Buffered: buffered, Dropped: buffered >> 7, StdinOpen: !running}
		if hasExit {
			p.Exit = &exitOut{Reason: reason}
			if code%2 == 0 {
				p.Exit.ExitCode = &code
			}
			if sig%3 != 0 {
				p.Exit.Signal = &sig
			}
		}
		ps := []procOut{p, {ID: label, Label: reason}}
		want, err := json.Marshal(map[string]any{"processes": ps})
		if err != nil {
			t.Fatal(err)
		}
		got := appendList(nil, ps)
		if !bytes.Equal(got, want) {
			t.Fatalf("hand-written:\n%q\nencoding/json:\n%q", got, want)
		}
		if !json.Valid(got) {
			t.Fatalf("invalid JSON: %q", got)
		}
	})
}

// BenchmarkListJSON compares the two encodings of a 500-process list
// natively (the guest runs the same code compiled to wasm).
func BenchmarkListJSON(b *testing.B) {
	ps := make([]procOut, 500)
	for i := range ps {
		ps[i] = procOut{ID: "4f3kq7v2bd5u6wxyzm3lprstn4aeiou2hjk5lmnopqrs7tuvwxya", Label: "s123", Command: "/bin/sh", Running: true, AgeMS: 123456, IdleMS: 4567, Buffered: 1024}
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(map[string]any{"processes": ps})
		}
	})
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			appendList(make([]byte, 0, 256*len(ps)+16), ps)
		}
	})
}

// TestAppendStringWordBoundaries: every byte appendString must escape, at
// every position of strings on both sides of the 8-byte words plain
// tests, is escaped as encoding/json does.
func TestAppendStringWordBoundaries(t *testing.T) {
	specials := []string{"\x00", "\x1f", "\"", "\\", "<", ">", "&", "\x7f", "é", "\u2028", "\xff"}
	for n := 0; n <= 17; n++ {
		for pos := 0; pos <= n; pos++ {
			for _, sp := range specials {
				s := strings.Repeat("x", pos) + sp + strings.Repeat("y", n-pos)
				want, _ := json.Marshal(s)
				if got := appendString(nil, s); !bytes.Equal(got, want) {
					t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
				}
			}
		}
		plainS := strings.Repeat("a~ 0Z/", 3)[:n]
		if !plain(plainS) {
			t.Errorf("plain(%q) = false", plainS)
		}
	}
}

// TestAppendUint: every digit count and both sides of each power of ten
// format as strconv does.
func TestAppendUint(t *testing.T) {
	vs := []uint64{0, ^uint64(0), ^uint64(0) - 1}
	for p := uint64(1); p <= 1e19; p *= 10 {
		vs = append(vs, p-1, p, p+1, 2*p+3)
	}
	for _, v := range vs {
		if got, want := string(appendUint([]byte("x"), v)), "x"+strconv.FormatUint(v, 10); got != want {
			t.Errorf("appendUint(%d) = %s, want %s", v, got, want)
		}
	}
}

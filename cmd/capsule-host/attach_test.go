package main

import (
	"strings"
	"testing"
)

// The detach-key scanner, read by read: keys split across reads, text in
// the same read before them (sent), after them (dropped), a broken
// prefix (sent as typed), and keys with a repeated byte.
func TestScanDetach(t *testing.T) {
	for _, tc := range []struct {
		keys  string
		reads []string
		sent  string
		det   bool
	}{
		{"ctrl-p,ctrl-q", []string{"ls\r\x10\x11rest"}, "ls\r", true},
		{"ctrl-p,ctrl-q", []string{"ab\x10", "\x11"}, "ab", true},
		{"ctrl-p,ctrl-q", []string{"\x10x", "\x10\x10\x11"}, "\x10x\x10", true},
		{"ctrl-p,ctrl-q", []string{"\x10", "y"}, "\x10y", false},
		{"ctrl-a,d", []string{"cho\x01e\r"}, "cho\x01e\r", false},
		{"a,a,d", []string{"aaad"}, "a", true},
		{"a,a,d", []string{"aa", "a", "xd"}, "aaaxd", false},
		{"a,b,a,c", []string{"ababac"}, "ab", true},
		{"q", []string{"q"}, "", true},
	} {
		keys, err := parseDetachKeys(tc.keys)
		if err != nil {
			t.Fatal(err)
		}
		var sent strings.Builder
		matched, det := 0, false
		for _, r := range tc.reads {
			s, d := scanDetach([]byte(r), keys, &matched)
			sent.Write(s)
			if det = d; d {
				break
			}
		}
		if sent.String() != tc.sent || det != tc.det {
			t.Errorf("keys %q, reads %q: sent %q detached %v; want %q %v", tc.keys, tc.reads, sent.String(), det, tc.sent, tc.det)
		}
	}
}

// parseDetachKeys: the spellings it takes and the ones it refuses, each
// refusal naming the offending key.
func TestParseDetachKeys(t *testing.T) {
	for spec, want := range map[string]string{
		"ctrl-p,ctrl-q": "\x10\x11",
		"CTRL-A,d":      "\x01d",
		"ctrl-@,ctrl-_": "\x00\x1f",
		"ctrl-[":        "\x1b",
		"x":             "x",
	} {
		if got, err := parseDetachKeys(spec); err != nil || string(got) != want {
			t.Errorf("%q: %q, %v; want %q", spec, got, err, want)
		}
	}
	for spec, names := range map[string]string{
		"ctrl-1":         `"ctrl-1"`,
		"ctrl-":          `"ctrl-"`,
		"ab":             `"ab"`,
		"":               `""`,
		"ctrl-p,,ctrl-q": `""`,
		"ctrl-p,ctrl-qq": `"ctrl-qq"`,
	} {
		if _, err := parseDetachKeys(spec); err == nil || !strings.Contains(err.Error(), names) {
			t.Errorf("%q: %v; want a refusal naming %s", spec, err, names)
		}
	}
}

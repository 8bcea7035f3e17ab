package terminal

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClusterCap(t *testing.T) {
	acc := "\u0301"
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"ascii untouched", []string{"plain \x1b[1mtext\x1b[0m\r\n"}, "plain \x1b[1mtext\x1b[0m\r\n"},
		{"short cluster kept", []string{"e" + acc + acc + " 日本 👨\u200d👩\u200d👧"}, "e" + acc + acc + " 日本 👨\u200d👩\u200d👧"},
		{"long run capped", []string{"e" + strings.Repeat(acc, 400) + "x"}, "e" + strings.Repeat(acc, MaxClusterRunes) + "x"},
		{"run across writes", []string{"e" + strings.Repeat(acc, 20), strings.Repeat(acc, 20) + "x"}, "e" + strings.Repeat(acc, MaxClusterRunes) + "x"},
		{"rune split across writes", []string{"a\xcc", "\x81b"}, "a" + acc + "b"},
		{"ZWJ chain capped", []string{"👨" + strings.Repeat("\u200d👨", 100)}, "👨" + strings.Repeat("\u200d👨", MaxClusterRunes/2)},
		{"new base resets", []string{"e" + strings.Repeat(acc, 40) + "a" + strings.Repeat(acc, 3)}, "e" + strings.Repeat(acc, MaxClusterRunes) + "a" + strings.Repeat(acc, 3)},
		{"invalid bytes pass", []string{"\xff\xfe ok"}, "\xff\xfe ok"},
	} {
		var c clusterCap
		var got []byte
		for _, ch := range tc.chunks {
			in := []byte(ch)
			orig := string(in)
			got = append(got, c.filter(in)...)
			if string(in) != orig {
				t.Errorf("%s: filter modified its input", tc.name)
			}
		}
		if string(got) != tc.want {
			t.Errorf("%s: got %q (%d runes), want %q (%d runes)", tc.name, got, utf8.RuneCount(got), tc.want, utf8.RuneCount([]byte(tc.want)))
		}
	}
}

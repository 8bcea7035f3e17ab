package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/registry"
)

// The operator view's ID prefixes: a unique prefix names its process; a
// prefix of 8+ characters that two or more IDs share is refused as
// invalid input that says it is ambiguous, how many it matches and the
// prefix that names each; none is no-such-process. (Real IDs share 8
// characters with odds of 2^-40 per pair, so the table makes the
// collision.)
func TestMatchPrefix(t *testing.T) {
	ids := []string{
		"abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrst",
		"abcdefghijkzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
		"abcdefghqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq",
		"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
	}
	if got, err := matchPrefix(ids, "bbbbbbbb"); err != nil || got != ids[3] {
		t.Errorf("unique prefix: %q, %v", got, err)
	}
	if got, err := matchPrefix(ids, "abcdefghijkl"); err != nil || got != ids[0] {
		t.Errorf("a longer prefix that is unique: %q, %v", got, err)
	}
	if _, err := matchPrefix(ids, "cccccccc"); !errors.Is(err, registry.ErrNoSuchProcess) {
		t.Errorf("no match: %v, want no such process", err)
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"abcdefgh", []string{`"abcdefgh" is ambiguous`, "matches 3 processes", "abcdefghijkl, abcdefghijkz, abcdefghq", "give more characters"}},
		{"abcdefghijk", []string{`"abcdefghijk" is ambiguous`, "matches 2 processes", "(abcdefghijkl, abcdefghijkz)"}},
	} {
		_, err := matchPrefix(ids, tc.prefix)
		if !errors.Is(err, registry.ErrInvalidInput) {
			t.Errorf("%q: %v, want invalid input", tc.prefix, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q lacks %q", tc.prefix, err, w)
			}
		}
	}
	many := []string{"xxxxxxxx1", "xxxxxxxx2", "xxxxxxxx3", "xxxxxxxx4", "xxxxxxxx5"}
	if _, err := matchPrefix(many, "xxxxxxxx"); err == nil || !strings.Contains(err.Error(), "(xxxxxxxx1, xxxxxxxx2, xxxxxxxx3 and 2 more)") {
		t.Errorf("five matches: %v", err)
	}
}

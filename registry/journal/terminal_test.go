package journal

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
)

// A terminal round-trips; a pipe process's record has no terminal key
// (the same bytes as before terminals); a bad size or no TERM is refused.
func TestTerminalRecord(t *testing.T) {
	p := sample(1)
	p.Terminal = &Terminal{Rows: 1000, Cols: 1, Term: "xterm", Resizes: []Resize{{At: 0, Rows: 2, Cols: 3}, {At: 10, Rows: 4, Cols: 5}}}
	v, err := EncodeProcess(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeProcess(p.Key[:], v)
	if err != nil || !reflect.DeepEqual(got.Terminal, p.Terminal) {
		t.Fatalf("round trip: %+v %v", got.Terminal, err)
	}
	p.Terminal = nil
	if v, _ = EncodeProcess(p); bytes.Contains(v, []byte(`"terminal"`)) {
		t.Errorf("pipe record carries a terminal key: %s", v)
	}
	for _, bad := range []Terminal{{Rows: 0, Cols: 80, Term: "x"}, {Rows: 24, Cols: 1001, Term: "x"}, {Rows: 24, Cols: 80},
		{Rows: 24, Cols: 80, Term: "x", Resizes: []Resize{{At: 5, Rows: 1, Cols: 1}, {At: 4, Rows: 1, Cols: 1}}},
		{Rows: 24, Cols: 80, Term: "x", Resizes: []Resize{{At: 5, Rows: 0, Cols: 1}}},
		{Rows: 24, Cols: 80, Term: "x", Resizes: slices.Repeat([]Resize{{At: 1, Rows: 1, Cols: 1}}, MaxResizes+1)}} {
		p.Terminal = &bad
		if _, err := EncodeProcess(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("terminal %+v: %v, want ErrInvalid", bad, err)
		}
	}
}

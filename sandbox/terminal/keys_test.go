package terminal

import (
	"bytes"
	"errors"
	"testing"
)

func TestEncodeKey(t *testing.T) {
	app := Modes{AppCursor: true, AppKeypad: true}
	cases := []struct {
		name string
		m    Modes
		want string
	}{
		{"Enter", Modes{}, "\r"},
		{"Tab", Modes{}, "\t"},
		{"BSpace", Modes{}, "\x7f"},
		{"Escape", Modes{}, "\x1b"},
		{"Space", Modes{}, " "},
		{"C-c", Modes{}, "\x03"},
		{"C-C", Modes{}, "\x03"},
		{"^c", Modes{}, "\x03"},
		{"C-a", Modes{}, "\x01"},
		{"C-z", Modes{}, "\x1a"},
		{"C-[", Modes{}, "\x1b"},
		{"C-@", Modes{}, "\x00"},
		{"C-Space", Modes{}, "\x00"},
		{"C-?", Modes{}, "\x7f"},
		{"M-x", Modes{}, "\x1bx"},
		{"M-Enter", Modes{}, "\x1b\r"},
		{"C-M-c", Modes{}, "\x1b\x03"},
		{"M-C-c", Modes{}, "\x1b\x03"},
		{"S-a", Modes{}, "A"},
		{"S-Tab", Modes{}, "\x1b[Z"},
		{"BTab", Modes{}, "\x1b[Z"},
		{"Up", Modes{}, "\x1b[A"},
		{"Down", Modes{}, "\x1b[B"},
		{"Right", Modes{}, "\x1b[C"},
		{"Left", Modes{}, "\x1b[D"},
		{"Home", Modes{}, "\x1b[H"},
		{"End", Modes{}, "\x1b[F"},
		{"Up", app, "\x1bOA"},
		{"Down", app, "\x1bOB"},
		{"Right", app, "\x1bOC"},
		{"Left", app, "\x1bOD"},
		{"Home", app, "\x1bOH"},
		{"End", app, "\x1bOF"},
		{"C-Up", Modes{}, "\x1b[1;5A"},
		{"C-Up", app, "\x1b[1;5A"},
		{"S-Left", Modes{}, "\x1b[1;2D"},
		{"M-Up", Modes{}, "\x1b[1;3A"},
		{"C-M-S-Right", Modes{}, "\x1b[1;8C"},
		{"PageUp", Modes{}, "\x1b[5~"},
		{"PgUp", Modes{}, "\x1b[5~"},
		{"PPage", Modes{}, "\x1b[5~"},
		{"PageDown", Modes{}, "\x1b[6~"},
		{"NPage", Modes{}, "\x1b[6~"},
		{"C-PageDown", Modes{}, "\x1b[6;5~"},
		{"IC", Modes{}, "\x1b[2~"},
		{"DC", Modes{}, "\x1b[3~"},
		{"Delete", Modes{}, "\x1b[3~"},
		{"F1", Modes{}, "\x1bOP"},
		{"F2", Modes{}, "\x1bOQ"},
		{"F3", Modes{}, "\x1bOR"},
		{"F4", Modes{}, "\x1bOS"},
		{"S-F1", Modes{}, "\x1b[1;2P"},
		{"F5", Modes{}, "\x1b[15~"},
		{"F6", Modes{}, "\x1b[17~"},
		{"F7", Modes{}, "\x1b[18~"},
		{"F8", Modes{}, "\x1b[19~"},
		{"F9", Modes{}, "\x1b[20~"},
		{"F10", Modes{}, "\x1b[21~"},
		{"F11", Modes{}, "\x1b[23~"},
		{"F12", Modes{}, "\x1b[24~"},
		{"C-F5", Modes{}, "\x1b[15;5~"},
		{"KP5", Modes{}, "5"},
		{"KP5", app, "\x1bOu"},
		{"KPEnter", Modes{}, "\r"},
		{"KPEnter", app, "\x1bOM"},
		{"a", Modes{}, "a"},
		{"é", Modes{}, "é"},
		{"^", Modes{}, "^"},
		{"-", Modes{}, "-"},
	}
	for _, c := range cases {
		got, err := EncodeKey(c.name, c.m)
		if err != nil {
			t.Errorf("%s %+v: %v", c.name, c.m, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s %+v: got %q, want %q", c.name, c.m, got, c.want)
		}
	}
}

func TestEncodeKeyErrors(t *testing.T) {
	for _, name := range []string{"Entr", "F13", "C-", "C-1", "C--", "C-Enter", "C-KP1", "C-S-a", "C-Foo", "M-", "S-Entr", "\xff", ""} {
		_, err := EncodeKey(name, Modes{})
		var ke *KeyError
		if !errors.As(err, &ke) || !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%q: got %v, want a *KeyError", name, err)
			continue
		}
		if ke.Name != name {
			t.Errorf("%q: error names %q", name, ke.Name)
		}
	}
}

func TestEncodeKeys(t *testing.T) {
	got, err := EncodeKeys([]Key{{Text: "ls -l"}, {Name: "Enter"}, {Name: "Up"}, {Text: "Enter"}}, Modes{AppCursor: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "ls -l\r\x1bOAEnter"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	_, err = EncodeKeys([]Key{{Name: "Enter"}, {Name: "Nope"}}, Modes{})
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Index != 1 || ke.Name != "Nope" {
		t.Fatalf("got %v (%+v), want key 1 Nope", err, ke)
	}
	if _, err := EncodeKeys([]Key{{Name: "Enter", Text: "x"}}, Modes{}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("name and text: got %v", err)
	}
}

func TestPaste(t *testing.T) {
	cases := []struct {
		in   string
		m    Modes
		want string
	}{
		{"a\nb\r\nc", Modes{}, "a\rb\rc"},
		{"a\nb", Modes{BracketedPaste: true}, "\x1b[200~a\rb\x1b[201~"},
		{"x\x1b[201~rm -rf /\n", Modes{BracketedPaste: true}, "\x1b[200~xrm -rf /\r\x1b[201~"},
		{"\x1b[20\x1b[201~1~y", Modes{BracketedPaste: true}, "\x1b[200~y\x1b[201~"},
		{"x\x1b[201~", Modes{}, "x\x1b[201~"},
	}
	for _, c := range cases {
		if got := Paste([]byte(c.in), c.m); string(got) != c.want {
			t.Errorf("Paste(%q, %+v) = %q, want %q", c.in, c.m, got, c.want)
		}
	}
	if got := Submit([]byte("echo hi"), Modes{BracketedPaste: true}); string(got) != "\x1b[200~echo hi\x1b[201~\r" {
		t.Errorf("Submit: %q", got)
	}
}

func FuzzKeys(f *testing.F) {
	for _, s := range []string{"Enter", "C-c", "M-C-S-Up", "^", "C-", "F12", "KP*", "é", "\xff", "S-"} {
		f.Add(s, false, false)
	}
	f.Fuzz(func(t *testing.T, name string, ac, ak bool) {
		m := Modes{AppCursor: ac, AppKeypad: ak}
		b, err := EncodeKey(name, m)
		if err != nil {
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Name != name {
				t.Fatalf("%q: error %v is not a *KeyError naming it", name, err)
			}
			return
		}
		if len(b) == 0 {
			t.Fatalf("%q: encoded to nothing", name)
		}
		all, err := EncodeKeys([]Key{{Name: name}, {Text: name}}, m)
		if err != nil || !bytes.Equal(all, append(b, name...)) {
			t.Fatalf("%q: EncodeKeys %q, %v", name, all, err)
		}
	})
}

func FuzzPaste(f *testing.F) {
	f.Add([]byte("a\x1b[201~b"), true)
	f.Add([]byte("\x1b[20\x1b[201~1~"), true)
	f.Fuzz(func(t *testing.T, text []byte, bracketed bool) {
		out := Paste(text, Modes{BracketedPaste: bracketed})
		if !bracketed {
			return
		}
		inner := out[len(pasteStart) : len(out)-len(pasteEnd)]
		if !bytes.HasPrefix(out, pasteStart) || !bytes.HasSuffix(out, pasteEnd) || bytes.Contains(inner, pasteEnd) {
			t.Fatalf("%q: pasted as %q", text, out)
		}
	})
}

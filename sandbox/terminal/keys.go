// Package terminal is the terminal tier's lower half: tmux key names
// encoded to the bytes a terminal sends, bracketed paste, and a screen
// model (a VT emulator fed the PTY's output) that knows the modes those
// encodings depend on. It knows no backend and no process; the backends
// and the registry wire it to a PTY.
package terminal

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalidKey is the class of every *KeyError.
var ErrInvalidKey = errors.New("invalid key")

// KeyError names the key of a send-keys list that cannot be encoded.
type KeyError struct {
	Index  int    // position in the list
	Name   string // the name as given
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("key %d %q: %s", e.Index, e.Name, e.Reason)
}

func (e *KeyError) Unwrap() error { return ErrInvalidKey }

// Key is one element of a send-keys list: a tmux key name (Name) or
// literal text (Text), never both. The two are distinct on purpose:
// tmux sends an unrecognised name as text, so a typo ("Entr") is typed
// instead of refused; here a Name must be a key.
type Key struct {
	Name string
	Text string
}

// Modes are the terminal modes the encodings depend on, as the
// application last set them (Screen.Modes).
type Modes struct {
	// AppCursor: DECCKM (CSI ? 1 h): cursor keys send SS3 (ESC O A), not CSI.
	AppCursor bool
	// AppKeypad: DECKPAM (ESC =): keypad keys send SS3 sequences.
	AppKeypad bool
	// BracketedPaste: DECSET 2004: pastes are wrapped in CSI 200~ / 201~.
	BracketedPaste bool
}

// Modifier bits, as xterm numbers them in "CSI 1 ; 1+bits X".
const (
	modShift = 1
	modMeta  = 2
	modCtrl  = 4
)

// cursorKeys are the keys whose final byte follows CSI (normal mode) or
// SS3 (application cursor mode).
var cursorKeys = map[string]byte{
	"Up": 'A', "Down": 'B', "Right": 'C', "Left": 'D', "Home": 'H', "End": 'F',
}

// tildeKeys are sent as CSI n ~ (xterm's numbering).
var tildeKeys = map[string]int{
	"IC": 2, "Insert": 2, "DC": 3, "Delete": 3,
	"PageUp": 5, "PgUp": 5, "PPage": 5, "PageDown": 6, "PgDn": 6, "NPage": 6,
	"F5": 15, "F6": 17, "F7": 18, "F8": 19, "F9": 20, "F10": 21, "F11": 23, "F12": 24,
}

// ss3Keys are F1 to F4: SS3 P..S unmodified, CSI 1 ; m P..S modified.
var ss3Keys = map[string]byte{"F1": 'P', "F2": 'Q', "F3": 'R', "F4": 'S'}

// plainKeys are single bytes.
var plainKeys = map[string]byte{
	"Enter": '\r', "Tab": '\t', "BSpace": 0x7f, "Escape": 0x1b, "Space": ' ',
}

// keypadKeys: the character sent in numeric keypad mode and the SS3 final
// byte in application keypad mode (DECKPAM).
var keypadKeys = map[string][2]byte{
	"KP0": {'0', 'p'}, "KP1": {'1', 'q'}, "KP2": {'2', 'r'}, "KP3": {'3', 's'},
	"KP4": {'4', 't'}, "KP5": {'5', 'u'}, "KP6": {'6', 'v'}, "KP7": {'7', 'w'},
	"KP8": {'8', 'x'}, "KP9": {'9', 'y'}, "KP/": {'/', 'o'}, "KP*": {'*', 'j'},
	"KP-": {'-', 'm'}, "KP+": {'+', 'k'}, "KP.": {'.', 'n'}, "KPEnter": {'\r', 'M'},
}

// EncodeKeys encodes a send-keys list for the terminal's current modes.
// A bad name is a *KeyError naming it and its index; nothing is encoded
// then, so a list is sent whole or not at all.
func EncodeKeys(keys []Key, m Modes) ([]byte, error) {
	var out []byte
	for i, k := range keys {
		if k.Name != "" && k.Text != "" {
			return nil, &KeyError{Index: i, Name: k.Name, Reason: "both a name and text"}
		}
		if k.Name == "" {
			out = append(out, k.Text...)
			continue
		}
		b, err := EncodeKey(k.Name, m)
		if err != nil {
			var ke *KeyError
			if errors.As(err, &ke) {
				ke.Index = i
			}
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// EncodeKey encodes one tmux key name: an optional chain of modifier
// prefixes (C- control, M- meta/alt, S- shift; also ^x for C-x), then a
// named key (Enter, Up, F5, KP0, ...) or a single character.
func EncodeKey(name string, m Modes) ([]byte, error) {
	bad := func(reason string) error { return &KeyError{Name: name, Reason: reason} }
	mods, base := splitMods(name)
	if base == "" {
		return nil, bad("no key after the modifiers")
	}
	if b, ok := specialModified(base, mods); ok {
		return b, nil
	}
	var b []byte
	var ok bool
	if mods&^modMeta == 0 {
		b, ok = unmodified(base, m)
	}
	if !ok {
		var err error
		if b, err = modified(base, mods&^modMeta); err != nil {
			return nil, bad(err.Error())
		}
	}
	if mods&modMeta != 0 {
		b = append([]byte{0x1b}, b...)
	}
	return b, nil
}

// splitMods strips the modifier prefixes. A lone "C-" or "^" is the key
// itself only when nothing follows ("^" and "-" are characters).
func splitMods(name string) (mods int, base string) {
	for {
		switch {
		case len(name) > 2 && name[1] == '-' && strings.IndexByte("CMS", name[0]) >= 0:
			mods |= map[byte]int{'C': modCtrl, 'M': modMeta, 'S': modShift}[name[0]]
			name = name[2:]
		case len(name) == 2 && name[0] == '^':
			mods |= modCtrl
			name = name[1:]
		default:
			return mods, name
		}
	}
}

// unmodified encodes a key without control or shift (meta is an ESC
// prefix added by the caller).
func unmodified(base string, m Modes) ([]byte, bool) {
	if c, ok := cursorKeys[base]; ok {
		if m.AppCursor {
			return []byte{0x1b, 'O', c}, true
		}
		return []byte{0x1b, '[', c}, true
	}
	if n, ok := tildeKeys[base]; ok {
		return []byte("\x1b[" + strconv.Itoa(n) + "~"), true
	}
	if c, ok := ss3Keys[base]; ok {
		return []byte{0x1b, 'O', c}, true
	}
	if c, ok := plainKeys[base]; ok {
		return []byte{c}, true
	}
	if k, ok := keypadKeys[base]; ok {
		if m.AppKeypad {
			return []byte{0x1b, 'O', k[1]}, true
		}
		return []byte{k[0]}, true
	}
	if base == "BTab" {
		return []byte("\x1b[Z"), true
	}
	if r, size := utf8.DecodeRuneInString(base); size == len(base) && r != utf8.RuneError {
		return []byte(base), true
	}
	return nil, false
}

// specialModified encodes a cursor, function or editing key with any
// modifier as xterm does: "CSI 1 ; m X" and "CSI n ; m ~", m being 1 plus
// the modifier bits (meta included: M-Up is CSI 1;3A, not ESC CSI A).
func specialModified(base string, mods int) ([]byte, bool) {
	if mods == 0 {
		return nil, false
	}
	p := strconv.Itoa(1 + mods)
	if c, ok := cursorKeys[base]; ok {
		return []byte("\x1b[1;" + p + string(c)), true
	}
	if c, ok := ss3Keys[base]; ok {
		return []byte("\x1b[1;" + p + string(c)), true
	}
	if n, ok := tildeKeys[base]; ok {
		return []byte("\x1b[" + strconv.Itoa(n) + ";" + p + "~"), true
	}
	return nil, false
}

// modified encodes a plain key or character with control and/or shift:
// a C0 byte for a control character, CSI Z for S-Tab. A combination a legacy terminal cannot express
// (C-1, C-Enter) is an error rather than a guess.
func modified(base string, mods int) ([]byte, error) {
	switch {
	case mods == modShift && base == "Tab":
		return []byte("\x1b[Z"), nil
	case mods == modCtrl && base == "Space":
		return []byte{0}, nil
	case mods == modShift && utf8.RuneCountInString(base) == 1:
		return []byte(strings.ToUpper(base)), nil
	case mods != modCtrl:
		break
	case len(base) != 1:
		if _, named := plainKeys[base]; named {
			return nil, fmt.Errorf("control with %s has no legacy encoding", base)
		}
		if _, named := keypadKeys[base]; named {
			return nil, fmt.Errorf("control with %s has no legacy encoding", base)
		}
		return nil, errors.New("unknown key name")
	default:
		if b, ok := controlByte(base[0]); ok {
			return []byte{b}, nil
		}
		return nil, fmt.Errorf("control with %q has no legacy encoding", base)
	}
	if _, ok := unmodified(base, Modes{}); !ok {
		return nil, errors.New("unknown key name")
	}
	return nil, errors.New("this modifier combination has no legacy encoding")
}

// controlByte is the C0 byte of control with c: letters and @[\]^_
// (either case), ? for DEL, as a VT100 sends them.
func controlByte(c byte) (byte, bool) {
	switch {
	case c >= 'a' && c <= 'z':
		return c - 'a' + 1, true
	case c >= '@' && c <= '_':
		return c - '@', true
	case c == '?':
		return 0x7f, true
	}
	return 0, false
}

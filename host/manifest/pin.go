package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"sync"
)

// ErrUnpinnable is the class of a valid manifest whose [capsule] sha256
// Pin cannot rewrite in place (a multi-line string, an inline table it
// cannot extend): the error says which line to write by hand.
var ErrUnpinnable = errors.New("the sha256 pin cannot be rewritten in place")

// pinError is a refusal of Pin: an *Error (file:line) of class
// ErrUnpinnable as well as ErrInvalid.
type pinError struct{ err *Error }

func (e *pinError) Error() string   { return e.err.Error() }
func (e *pinError) Unwrap() []error { return []error{e.err, ErrUnpinnable} }

// ParseUnpinned is Parse without the rule on the pin: [capsule] sha256 may
// be absent (SHA256 is then "") or any string (SHA256 holds it as
// written). Every other rule holds. It is for pin, which is about to set
// the pin from the module the manifest names.
func ParseUnpinned(file string, data []byte) (*Manifest, error) {
	m, _, err := parse(file, data, true)
	return m, err
}

// Pinned is a manifest text with a new pin.
type Pinned struct {
	Text     []byte // the whole manifest; data itself when nothing changed
	Old      string // the pin replaced, decoded ("" when it was absent)
	Line     int    // the line of the sha256 key in Text
	Inserted bool   // the key was absent and a line was added for it
}

// Pin returns data with [capsule] sha256 set to sum and every other byte
// unchanged: comments, order, spacing, line endings. The value is
// replaced between its quotes; an absent key gets its own line after
// module (else after the [capsule] header), written the way module is.
//
// Why it cannot go wrong silently: each candidate text is parsed again
// strictly and its decoded tree must equal the original's with only
// capsule.sha256 changed; when no candidate passes, Pin refuses with
// ErrUnpinnable and the line to write by hand. A manifest that does not
// parse (ParseUnpinned) is refused with the parser's file:line error.
func Pin(file string, data []byte, sum string) (*Pinned, error) {
	if !sha256RE().MatchString(sum) {
		return nil, fmt.Errorf("manifest.Pin: %q is not 64 lowercase hex digits", sum)
	}
	m, tree, err := parse(file, data, true)
	if err != nil {
		return nil, err
	}
	capsule, _ := tree["capsule"].(map[string]any)
	_, present := capsule["sha256"]
	want := maps.Clone(tree)
	want["capsule"] = maps.Clone(capsule)
	want["capsule"].(map[string]any)["sha256"] = sum
	check := func(text []byte) bool {
		_, got, err := parse(file, text, false)
		return err == nil && reflect.DeepEqual(got, want)
	}
	if present {
		line := m.lines.Find("capsule.sha256")
		if m.SHA256 == sum {
			return &Pinned{Text: data, Old: sum, Line: line}, nil
		}
		for _, c := range replaceCandidates(data, line, sum) {
			if check(c) {
				return &Pinned{Text: c, Old: m.SHA256, Line: line}, nil
			}
		}
		return nil, m.refuse("the pin is not written as sha256 = \"…\" on one line, so it cannot be rewritten in place; write that line as sha256 = %q", sum)
	}
	for _, after := range []int{m.lines.Find("capsule.module"), m.lines.Find("capsule")} {
		if c := insertAfter(data, after, sum); c != nil && check(c) {
			return &Pinned{Text: c, Line: after + 1, Inserted: true}, nil
		}
	}
	return nil, m.refuse("no sha256 key, and none could be added after module; add the line sha256 = %q to [capsule]", sum)
}

func (m *Manifest) refuse(format string, args ...any) error {
	return &pinError{&Error{File: m.File, Line: m.Line("capsule.sha256"), Key: "capsule.sha256", Msg: fmt.Sprintf(format, args...)}}
}

// keyRE finds a key (bare or quoted, alone or the last part of a dotted
// key) and its '='; the submatch is where the key starts.
func keyRE(key string) *regexp.Regexp {
	return regexp.MustCompile(`(?:^|[\s{,.])((?:` + key + `|"` + key + `"|'` + key + `')[ \t]*=[ \t]*)`)
}

var (
	sha256KeyRE = sync.OnceValue(func() *regexp.Regexp { return keyRE("sha256") })
	moduleKeyRE = sync.OnceValue(func() *regexp.Regexp { return keyRE("module") })
)

// lineSpan is the byte range of line n (1-based) in data, without its
// newline; ok is false when there is no such line.
func lineSpan(data []byte, n int) (start, end int, ok bool) {
	if n < 1 {
		return 0, 0, false
	}
	for ln := 1; ln < n; ln++ {
		i := bytes.IndexByte(data[start:], '\n')
		if i < 0 {
			return 0, 0, false
		}
		start += i + 1
	}
	end = len(data)
	if i := bytes.IndexByte(data[start:], '\n'); i >= 0 {
		end = start + i
	}
	return start, end, true
}

// maxCandidates bounds the texts Pin parses again: a real line has one
// `sha256 =`; more only appear inside strings, and each costs a parse.
const maxCandidates = 8

// replaceCandidates are data with the one-line string after each
// `sha256 =` on line n replaced by sum, the quotes kept: usually one; Pin
// keeps the first whose meaning is right.
func replaceCandidates(data []byte, n int, sum string) [][]byte {
	start, end, ok := lineSpan(data, n)
	if !ok {
		return nil
	}
	line := data[start:end]
	var out [][]byte
	for _, loc := range sha256KeyRE().FindAllSubmatchIndex(line, maxCandidates) {
		open := loc[3]
		if open >= len(line) || (line[open] != '"' && line[open] != '\'') {
			continue
		}
		q := line[open]
		if bytes.HasPrefix(line[open:], []byte{q, q, q}) {
			continue // a multi-line string: left to the hand
		}
		closing := stringEnd(line, open+1, q)
		if closing < 0 {
			continue
		}
		c := make([]byte, 0, len(data)-(closing-open-1)+len(sum))
		c = append(c, data[:start+open+1]...)
		c = append(c, sum...)
		out = append(out, append(c, data[start+closing:]...))
	}
	return out
}

// stringEnd is the index in line of the quote q closing the one-line
// string whose content starts at i (a basic string's escapes skipped),
// or -1.
func stringEnd(line []byte, i int, q byte) int {
	for ; i < len(line); i++ {
		switch line[i] {
		case '\\':
			if q == '"' {
				i++
			}
		case q:
			return i
		}
	}
	return -1
}

// insertAfter is data with a sha256 line added after line n, written
// like module's key when n holds it (same indentation, same dotted
// prefix), with n's line ending; nil when there is no line n.
func insertAfter(data []byte, n int, sum string) []byte {
	start, end, ok := lineSpan(data, n)
	if !ok {
		return nil
	}
	line := data[start:end]
	prefix := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
	if loc := moduleKeyRE().FindSubmatchIndex(line); loc != nil {
		prefix = line[:loc[2]]
	}
	nl := []byte("\n")
	if bytes.HasSuffix(line, []byte("\r")) {
		nl = []byte("\r\n")
	}
	ins := fmt.Appendf(nil, "%ssha256 = %q", prefix, sum)
	c := make([]byte, 0, len(data)+len(ins)+2)
	if end == len(data) { // the last line, without a newline: so stays the file
		c = append(append(append(c, data...), nl...), ins...)
		return c
	}
	c = append(c, data[:end+1]...)
	c = append(append(c, ins...), nl...)
	return append(c, data[end+1:]...)
}

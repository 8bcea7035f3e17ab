// Package stricttoml decodes TOML strictly and says which line a dotted key
// is on, so the manifest and the host config can both report every problem
// as "<file>:<line>: <key>: <what is wrong>".
//
// Why a scanner of our own: BurntSushi/toml keeps key positions private
// (MetaData has keys, not lines), so the lines are found by a lenient pass
// over the source. It never decides validity — the decoder does, and a
// syntax error carries the decoder's own position — it only has to agree
// with the decoder on where each key of a valid file is.
package stricttoml

import (
	"errors"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Problem is the first thing wrong with a TOML source.
type Problem struct {
	// Syntax is true when the source is not TOML at all; Key is then the
	// last key the decoder read, often not the faulty one.
	Syntax bool
	Line   int    // 0: unknown
	Key    string // canonical dotted key, "" when none
	Msg    string
}

// Decode decodes src into the struct v and returns the line of every key
// with the first problem: a syntax error (positioned by the decoder), a
// value of the wrong type, or a key v has no field for ("unknown key").
// Lines is nil on a syntax error.
func Decode(src string, v any) (Lines, *Problem) { return decode(src, v, true) }

// DecodeTree decodes src into a generic tree, for callers that check their
// schema by hand (every key has a place in a tree, so none is unknown here).
func DecodeTree(src string) (map[string]any, Lines, *Problem) {
	var tree map[string]any
	lines, p := decode(src, &tree, false)
	return tree, lines, p
}

func decode(src string, v any, strict bool) (Lines, *Problem) {
	md, err := toml.Decode(src, v)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Problem{Syntax: true, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
		}
		// Scanned only once the decoder accepted the syntax, so the scanner
		// never walks deeper than the decoder did.
		lines := Scan(src)
		// Type mismatches are plain errors "toml: line N (last key "k"): ...".
		line, key, msg := splitDecodeError(err.Error())
		if line == 0 && key != "" {
			line = lines.Find(key)
		}
		return lines, &Problem{Line: line, Key: key, Msg: msg}
	}
	lines := Scan(src)
	// MetaData.Undecoded is only meaningful for struct targets: values
	// decoded into interfaces are never marked decoded.
	if und := md.Undecoded(); strict && len(und) > 0 {
		k := und[0].String()
		return lines, &Problem{Line: lines.Find(k), Key: k, Msg: "unknown key"}
	}
	return lines, nil
}

// splitDecodeError parses BurntSushi's `toml: line 3 (last key "a.b"): msg`.
func splitDecodeError(s string) (line int, key, msg string) {
	s = strings.TrimPrefix(s, "toml: ")
	if rest, ok := strings.CutPrefix(s, "line "); ok {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			line = line*10 + int(rest[i]-'0')
			i++
		}
		s = strings.TrimPrefix(rest[i:], " ")
	}
	if rest, ok := strings.CutPrefix(s, "(last key \""); ok {
		if end := strings.Index(rest, "\"): "); end >= 0 {
			key = rest[:end]
			s = rest[end+4:]
		}
	}
	return line, key, s
}

// Key is the canonical dotted form of a key path, as toml.Key.String
// writes it (parts that are not bare keys are quoted), so keys built by
// callers match the keys the decoder and Scan report.
func Key(parts ...string) string { return toml.Key(parts).String() }

// Join appends one part to a canonical dotted prefix ("" for the root).
func Join(prefix, part string) string {
	if prefix == "" {
		return Key(part)
	}
	return prefix + "." + Key(part)
}

// Lines maps a canonical dotted key to the first line (1-based) that
// defines it: a [table] or [[array]] header, a `key = value` line, or a
// key inside an inline table.
type Lines map[string]int

// Find returns the line of key, else the first line of a key under it
// (a table defined only through its children), else the line of its
// longest defined prefix (the table a missing key belongs in), else 0.
func (l Lines) Find(key string) int {
	if n, ok := l[key]; ok {
		return n
	}
	first := 0
	for k, n := range l {
		if strings.HasPrefix(k, key+".") && (first == 0 || n < first) {
			first = n
		}
	}
	if first > 0 {
		return first
	}
	for k := key; ; {
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			return 0
		}
		k = k[:i]
		if n, ok := l[k]; ok {
			return n
		}
	}
}

// Scan finds the line of every key in src. It understands comments,
// basic and literal strings (multi-line too, with escapes), arrays and
// inline tables spanning lines, quoted and dotted keys, and [[array]]
// headers; on input that is not TOML it still terminates, with lines
// that are merely unreliable.
func Scan(src string) Lines {
	s := scanner{src: src, line: 1, lines: Lines{}}
	var table toml.Key
	for {
		s.skipSpace(true)
		if s.eof() {
			return s.lines
		}
		ln := s.line
		if s.peek() == '[' {
			s.next()
			if s.peek() == '[' {
				s.next()
			}
			table = s.key()
			s.record(table, ln)
		} else if k := s.key(); len(k) > 0 && s.peek() == '=' {
			s.next()
			full := concat(table, k)
			s.record(full, ln)
			s.value(full)
		}
		s.skipLine() // closing brackets, a comment, or garbage
	}
}

type scanner struct {
	src   string
	i     int
	line  int
	lines Lines
}

func (s *scanner) eof() bool { return s.i >= len(s.src) }

func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.i]
}

func (s *scanner) next() byte {
	c := s.src[s.i]
	s.i++
	if c == '\n' {
		s.line++
	}
	return c
}

func (s *scanner) record(k toml.Key, line int) {
	if len(k) == 0 {
		return
	}
	if key := k.String(); s.lines[key] == 0 {
		s.lines[key] = line
	}
}

// skipSpace skips blanks; with nl also newlines and comments.
func (s *scanner) skipSpace(nl bool) {
	for !s.eof() {
		switch s.peek() {
		case ' ', '\t', '\r':
			s.next()
		case '\n':
			if !nl {
				return
			}
			s.next()
		case '#':
			if !nl {
				return
			}
			for !s.eof() && s.peek() != '\n' {
				s.next()
			}
		default:
			return
		}
	}
}

// skipLine skips to just past the end of the line.
func (s *scanner) skipLine() {
	for !s.eof() && s.next() != '\n' {
	}
}

// key reads a dotted key and stops before whatever follows it.
func (s *scanner) key() toml.Key {
	var k toml.Key
	for {
		s.skipSpace(false)
		switch c := s.peek(); {
		case c == '"' || c == '\'':
			raw := s.str()
			if c == '"' {
				if u, err := strconv.Unquote(`"` + raw + `"`); err == nil {
					raw = u
				}
			}
			k = append(k, raw)
		case isBare(c):
			st := s.i
			for !s.eof() && isBare(s.peek()) {
				s.next()
			}
			k = append(k, s.src[st:s.i])
		default:
			return k
		}
		s.skipSpace(false)
		if s.peek() != '.' {
			return k
		}
		s.next()
	}
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// str reads a string starting at its opening quote and returns its raw
// content (escapes kept). An unterminated single-line string ends at the
// end of the line.
func (s *scanner) str() string {
	q := s.next()
	delim := string(q)
	if strings.HasPrefix(s.src[s.i:], delim+delim) {
		s.i += 2
		delim = strings.Repeat(delim, 3)
	}
	multi := len(delim) == 3
	st := s.i
	for !s.eof() {
		c := s.peek()
		switch {
		case c == '\n' && !multi:
			return s.src[st:s.i]
		case c == '\\' && q == '"':
			s.next()
			if !s.eof() {
				s.next()
			}
		case strings.HasPrefix(s.src[s.i:], delim):
			end := s.i
			s.i += len(delim)
			// Up to two quotes may sit just inside a closing """.
			for n := 0; multi && n < 2 && s.peek() == q; n++ {
				end++
				s.i++
			}
			return s.src[st:end]
		default:
			s.next()
		}
	}
	return s.src[st:]
}

// value skips one value; keys of inline tables in it are recorded under
// key (an array's elements share the array's key, as in toml.MetaData).
func (s *scanner) value(key toml.Key) {
	s.skipSpace(false)
	switch s.peek() {
	case '"', '\'':
		s.str()
	case '[':
		s.next()
		s.items(']', func() { s.value(key) })
	case '{':
		s.next()
		s.items('}', func() {
			ln := s.line
			k := s.key()
			s.skipSpace(false)
			if len(k) > 0 && s.peek() == '=' {
				s.next()
				full := concat(key, k)
				s.record(full, ln)
				s.value(full)
			}
		})
	default: // number, boolean, date-time
		for !s.eof() && !strings.ContainsRune(",]}#\n", rune(s.peek())) {
			s.next()
		}
	}
}

// items reads comma-separated items up to close, across lines and
// comments, always making progress on garbage.
func (s *scanner) items(close byte, item func()) {
	for {
		s.skipSpace(true)
		switch {
		case s.eof():
			return
		case s.peek() == close:
			s.next()
			return
		case s.peek() == ',':
			s.next()
			continue
		}
		st := s.i
		item()
		if s.i == st {
			s.next()
		}
	}
}

func concat(a, b toml.Key) toml.Key {
	return append(append(make(toml.Key, 0, len(a)+len(b)), a...), b...)
}

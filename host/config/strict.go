package config

import (
	"errors"
	"strings"

	"github.com/BurntSushi/toml"
)

// decodeStrict decodes data into v and turns every TOML problem into an
// *Error with a line: syntax and type errors carry one from the decoder;
// an unknown key is located with keyLines, because the decoder keeps key
// positions private.
func decodeStrict(file string, data []byte, v any) (keyLines, error) {
	lines := scanKeys(string(data))
	md, err := toml.Decode(string(data), v)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			msg := pe.Message
			return lines, &Error{File: file, Line: pe.Position.Line, Key: pe.LastKey, Msg: msg}
		}
		// Type mismatches are plain errors "toml: line N (last key "k"): ...".
		line, key, msg := splitDecodeError(err.Error())
		if line == 0 && key != "" {
			line = lines.find(key)
		}
		return lines, &Error{File: file, Line: line, Key: key, Msg: msg}
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0].String()
		return lines, &Error{File: file, Line: lines.find(k), Key: k, Msg: "unknown key"}
	}
	return lines, nil
}

// splitDecodeError parses BurntSushi's `toml: line 3 (last key "a.b"): msg`.
func splitDecodeError(s string) (line int, key, msg string) {
	s = strings.TrimPrefix(s, "toml: ")
	if rest, ok := strings.CutPrefix(s, "line "); ok {
		n := 0
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			n = n*10 + int(rest[i]-'0')
			i++
		}
		line = n
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

// keyLines maps a dotted key path to the first line that defines it.
type keyLines map[string]int

// find returns the line of key, else the first line of a key under it,
// else the line of its longest defined prefix, else 0.
func (kl keyLines) find(key string) int {
	if l, ok := kl[key]; ok {
		return l
	}
	first := 0
	for k, l := range kl {
		if strings.HasPrefix(k, key+".") && (first == 0 || l < first) {
			first = l
		}
	}
	if first > 0 {
		return first
	}
	for k := key; k != ""; {
		if l, ok := kl[k]; ok {
			return l
		}
		i := strings.LastIndex(k, ".")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return 0
}

// scanKeys is a small line scanner for the TOML subset config files use:
// [table] and [[array]] headers and `key = value` lines (bare, dotted or
// quoted keys). Multi-line strings and arrays are skipped over well enough
// for error positions; it never decides validity (the decoder does).
func scanKeys(src string) keyLines {
	kl := keyLines{}
	table := ""
	inMulti := "" // closing delimiter of a multi-line string
	depth := 0    // open [ of a multi-line array
	for i, raw := range strings.Split(src, "\n") {
		ln := i + 1
		line := strings.TrimSpace(raw)
		if inMulti != "" {
			if strings.Contains(line, inMulti) {
				inMulti = ""
			}
			continue
		}
		if depth > 0 {
			depth += strings.Count(line, "[") - strings.Count(line, "]")
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if strings.HasPrefix(line, "[") {
			h := strings.TrimLeft(line, "[")
			if j := strings.Index(h, "]"); j >= 0 {
				h = h[:j]
			}
			table = joinKey(parseKey(h))
			if _, ok := kl[table]; !ok {
				kl[table] = ln
			}
			continue
		}
		eq := keyEnd(line)
		if eq < 0 {
			continue
		}
		k := joinKey(parseKey(line[:eq]))
		full := k
		if table != "" {
			full = table + "." + k
		}
		if _, ok := kl[full]; !ok {
			kl[full] = ln
		}
		val := strings.TrimSpace(line[eq+1:])
		for _, d := range []string{`"""`, `'''`} {
			if strings.HasPrefix(val, d) && !strings.Contains(val[3:], d) {
				inMulti = d
			}
		}
		if strings.HasPrefix(val, "[") {
			depth = strings.Count(val, "[") - strings.Count(val, "]")
		}
	}
	return kl
}

// keyEnd returns the index of the '=' that ends the key, skipping quotes.
func keyEnd(line string) int {
	var q byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '"' || c == '\'':
			q = c
		case c == '=':
			return i
		}
	}
	return -1
}

func parseKey(s string) []string {
	var parts []string
	var cur strings.Builder
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			q = c
		case c == '.':
			parts = append(parts, strings.TrimSpace(cur.String()))
			cur.Reset()
		case c == ' ' || c == '\t':
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, strings.TrimSpace(cur.String()))
}

// joinKey matches toml.Key.String for the keys we look up (BurntSushi
// quotes parts that are not bare keys).
func joinKey(parts []string) string {
	return toml.Key(parts).String()
}

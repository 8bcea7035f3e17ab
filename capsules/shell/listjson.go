package main

import (
	"strconv"
	"unicode/utf8"
)

// The list_processes answer is encoded by hand: encoding/json's
// reflection took most of the guest's share of a list (500 processes,
// about 10 fields each), where appending to one buffer costs no
// allocation per record. The output is byte for byte what
// json.Marshal(map[string]any{"processes": out}) writes
// (TestListJSONMatchesEncodingJSON, FuzzListJSON), HTML-safe escapes
// included, so the schema agents see does not move.

// appendList appends {"processes":[...]} for ps.
func appendList(b []byte, ps []procOut) []byte {
	b = append(b, `{"processes":[`...)
	for i := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendProc(b, &ps[i])
	}
	return append(b, "]}"...)
}

// appendProc appends one entry, its fields in procOut's order.
func appendProc(b []byte, p *procOut) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, p.ID)
	b = append(b, `,"label":`...)
	b = appendString(b, p.Label)
	b = append(b, `,"command":`...)
	b = appendString(b, p.Command)
	b = append(b, `,"running":`...)
	b = strconv.AppendBool(b, p.Running)
	if e := p.Exit; e != nil {
		b = append(b, `,"exit":{`...)
		sep := ""
		if e.ExitCode != nil {
			b = append(b, `"exit_code":`...)
			b = strconv.AppendInt(b, int64(*e.ExitCode), 10)
			sep = ","
		}
		if e.Signal != nil {
			b = append(b, sep+`"signal":`...)
			b = strconv.AppendInt(b, int64(*e.Signal), 10)
			sep = ","
		}
		if e.Reason != "" {
			b = append(b, sep+`"reason":`...)
			b = appendString(b, e.Reason)
		}
		b = append(b, '}')
	}
	b = append(b, `,"age_ms":`...)
	b = strconv.AppendUint(b, p.AgeMS, 10)
	b = append(b, `,"idle_ms":`...)
	b = strconv.AppendUint(b, p.IdleMS, 10)
	b = append(b, `,"stdin_open":`...)
	b = strconv.AppendBool(b, p.StdinOpen)
	b = append(b, `,"buffered_bytes":`...)
	b = strconv.AppendUint(b, p.Buffered, 10)
	b = append(b, `,"bytes_dropped":`...)
	b = strconv.AppendUint(b, p.Dropped, 10)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json does
// with HTML escaping: ", \ and the short control escapes by name, other
// control bytes and <, >, & as \u00XX, U+2028 and U+2029 as \u2028 and
// \u2029, and each byte of invalid UTF-8 as \ufffd.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += n
			continue
		}
		i += n
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

package component

import (
	"errors"
	"fmt"
)

// Error classes: every error of this package matches one with errors.Is.
var (
	// ErrMalformed: the bytes are not a valid component (truncated, bad
	// LEB128, an index out of range, a count larger than the section).
	ErrMalformed = errors.New("malformed component binary")
	// ErrUnsupported: a valid construct this host cannot run (yet).
	ErrUnsupported = errors.New("component construct not supported")
)

// Error names where in the binary a component was refused: the section
// (by its component-model name), the byte offset from the start of the
// outermost binary, and for ErrUnsupported the construct and what to do.
type Error struct {
	Section string // "core module", "canon", "type", ...; "" for the header
	Offset  int
	// Construct is the refused construct ("canon lift option utf16",
	// "start section"); empty for ErrMalformed.
	Construct string
	Reason    string
	// Hint says what the capsule author can do instead.
	Hint string
	kind error
}

func (e *Error) Error() string {
	at := fmt.Sprintf("at offset %#x", e.Offset)
	if e.Section != "" {
		at = e.Section + " section " + at
	}
	s := fmt.Sprintf("%v: %s: %s", e.kind, at, e.Reason)
	if e.Construct != "" {
		s = fmt.Sprintf("%v: %s %s: %s", e.kind, e.Construct, at, e.Reason)
	}
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.kind }

func malformed(section string, off int, format string, args ...any) *Error {
	return &Error{Section: section, Offset: off, Reason: fmt.Sprintf(format, args...), kind: ErrMalformed}
}

func unsupported(section string, off int, construct, hint string) *Error {
	return &Error{Section: section, Offset: off, Construct: construct, Reason: "not supported by this host", Hint: hint, kind: ErrUnsupported}
}

package main

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/capsules/sdk/terminal"
)

// The host's wait-for matches from a cursor or from now: capsule:process
// 1.2.0 has no cursor for the start of a stream (`none` is "from now"), and
// a read-since cursor can only be had after a byte. An agent that asks for
// a prompt after it was printed must still see it, so wait_for without a
// cursor for the stream matches here, in the guest: what the stream
// retains from its start, then each new burst, woken by the host (a
// wait-for of any byte). Same engine as the host (Go regexp, RE2), same
// rule: the last startOverlap bytes stay in front of new ones, a match
// must end in new bytes, and a gap (dropped bytes) breaks the overlap.
// The reads do not drain: the shell's processes are DropOldest (a
// read-since only acknowledges for backpressure).
const (
	startBatch   = 64 << 10
	startOverlap = 4096
	maxRegex     = 4096
)

var errNoMatch = errors.New("the output ended without a match")

// matchFromStart returns the host cursor just after the first match of
// expr in the stream from its start, within timeout (process.ErrWaitTimeout)
// or before the output ends (process.ErrClosed).
func matchFromStart(id string, s process.LogStream, expr string, timeout time.Duration) (string, error) {
	if len(expr) > maxRegex {
		return "", fmt.Errorf("%w: regex of %d bytes (max %d)", process.ErrInvalidInput, len(expr), maxRegex)
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return "", fmt.Errorf("%w: invalid regex %q: %v", process.ErrInvalidInput, expr, err)
	}
	deadline := time.Now().Add(timeout)
	var cur *string // nil: the start
	var tail []byte
	for {
		ch, err := process.ReadSince(id, s, cur, startBatch)
		if err != nil {
			return "", err
		}
		if ch.BytesDropped > 0 {
			tail = nil
		}
		if len(ch.Data) > 0 {
			buf := append(tail, ch.Data...)
			if end, ok := matchEnd(re, buf, len(tail)); ok {
				return cursorAt(id, s, cur, end-len(tail))
			}
			tail = append([]byte(nil), buf[max(0, len(buf)-startOverlap):]...)
			cur = &ch.Next
			continue
		}
		if ch.EOF {
			return "", fmt.Errorf("%w: %w", process.ErrClosed, errNoMatch)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return "", process.ErrWaitTimeout
		}
		// Caught up: sleep in the host until a byte comes.
		_, err = terminal.WaitFor(id, terminal.Match(s, &ch.Next, `(?s).`), uint64(left.Milliseconds()))
		if err != nil && !errors.Is(err, process.ErrClosed) { // closed: the next read says EOF
			return "", err
		}
		cur = &ch.Next
	}
}

// cursorAt is the cursor n bytes after cur (nil: the start), read again
// to get it. An empty match at the very start has no cursor of its own:
// it gets the one after the first byte.
func cursorAt(id string, s process.LogStream, cur *string, n int) (string, error) {
	if n == 0 {
		if cur != nil {
			return *cur, nil
		}
		n = 1
	}
	at, err := process.ReadSince(id, s, cur, uint32(n))
	return at.Next, err
}

// matchEnd returns the end of the first match of re in buf that ends
// after skip (the overlap already scanned), as the host's wait-for does.
func matchEnd(re *regexp.Regexp, buf []byte, skip int) (int, bool) {
	for _, loc := range re.FindAllIndex(buf, -1) {
		if loc[1] > skip || (skip == 0 && loc[1] == 0) {
			return loc[1], true
		}
	}
	return 0, false
}

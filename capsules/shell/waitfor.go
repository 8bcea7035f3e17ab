package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/capsules/sdk/terminal"
)

type waitForIn struct {
	ID        string  `json:"id"`
	Regex     *string `json:"regex"`
	Stream    string  `json:"stream"`
	Cursor    string  `json:"cursor"`
	QuietMS   *uint64 `json:"quiet_ms"`
	Input     bool    `json:"input"`
	Exit      bool    `json:"exit"`
	TimeoutMS *uint64 `json:"timeout_ms"`
}

func (in waitForIn) Validate() error {
	if in.ID == "" {
		return errors.New(`"id" is required`)
	}
	n := 0
	for _, set := range []bool{in.Regex != nil, in.QuietMS != nil, in.Input, in.Exit} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf(`give exactly one of "regex", "quiet_ms", "input": true, "exit": true (got %d)`, n)
	}
	if in.QuietMS != nil && *in.QuietMS == 0 {
		return errors.New(`"quiet_ms" must be at least 1`)
	}
	if in.TimeoutMS != nil && *in.TimeoutMS > maxYieldMS {
		return fmt.Errorf(`"timeout_ms" is %d; at most %d (a tool call is bounded by the host)`, *in.TimeoutMS, maxYieldMS)
	}
	switch in.Stream {
	case "", "stdout", "stderr":
		return nil
	}
	return fmt.Errorf(`"stream" is %q; one of stdout, stderr`, in.Stream)
}

// streams are the streams the cursor covers, as read_process_logs reads
// them: "OUT.ERR" for both, else the one "stream" names (stdout when
// omitted), so a cursor passes between the two tools unchanged.
func (in waitForIn) streams() (stdout, stderr bool) {
	if strings.Contains(in.Cursor, ".") {
		return true, true
	}
	return in.Stream != "stderr", in.Stream == "stderr"
}

// matchStream is the stream a regex matches and the host cursor the
// match starts from ("": the stream's start, matchFromStart).
func (in waitForIn) matchStream(c cursor) (process.LogStream, string) {
	if in.Stream == "stderr" {
		return process.Stderr, c.Err
	}
	return process.Stdout, c.Out
}

// condition builds the wait-condition; c is the read_process_logs cursor
// the match starts from (not empty for a regex: see matchFromStart).
func (in waitForIn) condition(c cursor) terminal.Condition {
	switch {
	case in.Regex != nil:
		s, host := in.matchStream(c)
		return terminal.Match(s, &host, *in.Regex)
	case in.QuietMS != nil:
		return terminal.QuietFor(*in.QuietMS)
	case in.Input:
		return terminal.WaitInput()
	}
	return terminal.WaitExit()
}

// waitFor serves terminal and pipe processes alike. The cursor it takes
// and returns is read_process_logs' format: the matched stream's position
// moves to just after the match (or to stdout's end for the other
// conditions), the other stream's stays where it was.
func waitFor(in waitForIn) (any, error) {
	const tool = "wait_for"
	out, errS := in.streams()
	c, err := parseCursor(in.Cursor, out, errS)
	if err != nil {
		return nil, fmt.Errorf("invalid input: %w", err)
	}
	timeout := uint64(defaultYieldMS)
	if in.TimeoutMS != nil {
		timeout = *in.TimeoutMS
	}
	var r terminal.WaitResult
	if s, host := in.matchStream(c); in.Regex != nil && host == "" {
		r.Fired = terminal.OutputMatched
		r.Cursor, err = matchFromStart(in.ID, s, *in.Regex, time.Duration(timeout)*time.Millisecond)
	} else {
		r, err = terminal.WaitFor(in.ID, in.condition(c), timeout)
	}
	switch {
	case errors.Is(err, process.ErrWaitTimeout):
		return map[string]any{"id": in.ID, "fired": nil, "timed_out": true, "cursor": in.Cursor,
			"note": fmt.Sprintf("nothing happened within %d ms; call wait_for again, or look with terminal_screen or read_process_logs", timeout)}, nil
	case errors.Is(err, process.ErrClosed):
		return map[string]any{"id": in.ID, "fired": nil, "cannot_happen": true, "cursor": in.Cursor,
			"note": "the condition can no longer happen: the process exited (see read_process_logs for its output and exit)"}, nil
	case err != nil:
		return nil, fail(tool, err)
	}
	if in.Regex != nil && in.Stream == "stderr" {
		c.Err = r.Cursor
	} else {
		c.Out = r.Cursor
	}
	res := map[string]any{"id": in.ID, "fired": r.Fired.String(), "cursor": c.String(out, errS)}
	if s, err := screen(in.ID, 0); err == nil {
		res["screen"] = s.Screen
	} else if !errors.Is(err, process.ErrInvalidInput) { // a pipe process has no screen
		return nil, fail(tool, err)
	}
	return res, nil
}

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/capsule-host/capsule-host/capsules/sdk"
	"github.com/capsule-host/capsule-host/capsules/sdk/process"
)

// Bounds of one exchange.
const (
	readChunk = 1 << 20
	// maxLine bounds one JSON-RPC line from the server (a tools/list of a
	// large server is well under it).
	maxLine = 16 << 20
	// maxNotes bounds the notifications returned with one result; the
	// rest are counted in notifications_dropped (and stay in the log).
	maxNotes = 256
)

// message is one JSON-RPC 2.0 message as read from the server.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

// exchange is what one request brought back.
type exchange struct {
	Result json.RawMessage
	// Error is the server's JSON-RPC error object, if it answered with one.
	Error json.RawMessage
	// Notes are the notifications read between the start cursor and the
	// response; Dropped counts those over maxNotes.
	Notes   []json.RawMessage
	Dropped int
	// Cursor is the stdout position just past the response line: pass it
	// back to start the next exchange there (no notification is then
	// returned twice, none skipped).
	Cursor string
	// Skipped counts stdout lines that were not JSON-RPC (a server must
	// not print anything else on stdout; they are kept in the log).
	Skipped int
}

// newRequestID is a request ID no other call uses: calls to one server
// come from many instances, each matching only its own response.
func newRequestID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "ch-" + hex.EncodeToString(b[:]), nil
}

// send writes one message as one line (MCP's stdio framing).
func send(id string, msg map[string]any) error {
	msg["jsonrpc"] = "2.0"
	b, err := json.Marshal(msg)
	if err != nil {
		return sdk.Errorf("invalid-input", "encoding the request: %v", err)
	}
	if bytes.IndexByte(b, '\n') >= 0 {
		return sdk.Errorf("invalid-input", "the request encodes with a newline") // json.Marshal never does
	}
	_, err = process.WriteStdin(id, append(b, '\n'))
	return err
}

// start returns where a request sent now must look for its response:
// the caller's cursor (from a previous result: every notification since
// then comes back too), else the end of the server's stdout (none of its
// history); and the event cursor after the newest event, to wait on.
func start(id, known string) (string, uint64, error) {
	cur := &known
	if known == "" {
		cur = nil
		for {
			ch, err := process.ReadSince(id, process.Stdout, cur, readChunk)
			if err != nil {
				return "", 0, err
			}
			cur = &ch.Next
			if len(ch.Data) == 0 {
				break
			}
		}
	}
	var ev uint64
	for {
		b, err := process.PollEvents(ev, 256, 0)
		if err != nil {
			return "", 0, err
		}
		ev = b.Next
		if len(b.Events) == 0 {
			return *cur, ev, nil
		}
	}
}

// request sends method with params and waits, until deadline, for the
// response with its ID, reading stdout from cursor (none: the start).
func request(id, method string, params any, cursor *string, ev uint64, deadline time.Time) (exchange, error) {
	rid, err := newRequestID()
	if err != nil {
		return exchange{}, err
	}
	msg := map[string]any{"id": rid, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if err := send(id, msg); err != nil {
		return exchange{}, err
	}
	return await(id, rid, cursor, ev, deadline)
}

// await reads the server's stdout from cursor until the response to rid.
// Between reads it blocks on poll-events (new output or an exit of this
// principal's processes wakes it), so nothing polls on a timer.
func await(id, rid string, cursor *string, ev uint64, deadline time.Time) (exchange, error) {
	var x exchange
	want, _ := json.Marshal(rid)
	var buf []byte
	// boundary is a cursor where buf was empty, since the bytes read
	// from it.
	var boundary *string
	since := 0
	if cursor != nil {
		boundary = cursor
	}
	for {
		ch, err := process.ReadSince(id, process.Stdout, cursor, readChunk)
		if err != nil {
			return x, err
		}
		cursor = &ch.Next
		buf = append(buf, ch.Data...)
		since += len(ch.Data)
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			line := buf[:i]
			buf = buf[i+1:]
			if done, err := x.take(id, line, want); done || err != nil {
				x.Cursor = after(id, boundary, since-len(buf), ch.Next)
				return x, err
			}
		}
		if len(buf) == 0 {
			boundary, since = &ch.Next, 0
		}
		if len(buf) > maxLine {
			return x, sdk.Errorf("too-large", "the server wrote a line over %d bytes on stdout", maxLine)
		}
		if ch.EOF {
			return x, exited(id)
		}
		if len(ch.Data) > 0 {
			continue // more may be buffered
		}
		left := time.Until(deadline)
		if left <= 0 {
			return x, sdk.Errorf("timeout", "no response from the server within the call's timeout (request %s); it may still answer: its stdout and stderr are in the log", rid)
		}
		b, err := process.PollEvents(ev, 64, uint64(left.Milliseconds())+1)
		if err != nil {
			return x, err
		}
		ev = b.Next
	}
}

// after is the cursor just past the response line, n bytes on from
// boundary (nil: the log's start), re-read to get the host's cursor
// there. If output was evicted in between it is boundary itself, or the
// chunk's end when there is none: a notification may then come back
// twice, rather than be skipped.
func after(id string, boundary *string, n int, fallback string) string {
	cur := boundary
	for n > 0 {
		ch, err := process.ReadSince(id, process.Stdout, cur, uint32(min(n, readChunk)))
		if err != nil || len(ch.Data) == 0 || len(ch.Data) > n || ch.BytesDropped != 0 {
			if boundary != nil {
				return *boundary
			}
			return fallback
		}
		n -= len(ch.Data)
		cur = &ch.Next
	}
	return *cur
}

// take handles one stdout line: the response to want ends the exchange;
// a notification is kept; a request from the server is answered (ping
// with an empty result, anything else with method-not-found: this client
// offers no sampling, roots or elicitation); another call's response is
// left to that call.
func (x *exchange) take(id string, line, want []byte) (bool, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return false, nil
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		x.Skipped++
		return false, nil
	}
	switch {
	case m.Method == "" && bytes.Equal(m.ID, want):
		x.Result, x.Error = m.Result, m.Error
		return true, nil
	case m.Method != "" && len(m.ID) == 0:
		if len(x.Notes) < maxNotes {
			x.Notes = append(x.Notes, append(json.RawMessage(nil), line...))
		} else {
			x.Dropped++
		}
	case m.Method != "":
		reply := map[string]any{"id": m.ID}
		if m.Method == "ping" {
			reply["result"] = map[string]any{}
		} else {
			reply["error"] = map[string]any{"code": -32601, "message": "capsule-host mcp-stdio does not offer " + m.Method}
		}
		return false, send(id, reply)
	}
	return false, nil
}

// exited is the error for a server that ended before it answered, with
// its exit and the end of its stderr (why it ended, usually).
func exited(id string) error {
	st, err := process.Status(id)
	if err != nil {
		return err
	}
	how := "exited"
	if e := st.Exit; e != nil && e.Signal != nil {
		how = fmt.Sprintf("was killed by signal %d", *e.Signal)
	} else if e != nil && e.ExitCode != nil {
		how = fmt.Sprintf("exited with code %d", *e.ExitCode)
	}
	return sdk.Errorf("server-exited", "the MCP server %s before it answered; stderr ends: %q", how, stderrTail(id, 2048))
}

// stderrTail is the last n bytes of the server's retained stderr.
func stderrTail(id string, n int) string {
	var cur *string
	var last []byte
	for {
		ch, err := process.ReadSince(id, process.Stderr, cur, readChunk)
		if err != nil || len(ch.Data) == 0 {
			break
		}
		last = append(last, ch.Data...)
		if len(last) > n {
			last = last[len(last)-n:]
		}
		cur = &ch.Next
	}
	return string(last)
}

package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK's stdio transport decodes stdin as one JSON stream: a malformed
// line, or a JSON value that is no JSON-RPC message, ends the whole
// session. MCP's stdio framing is one message per line, so a bad line can
// be answered and skipped instead: StdioTransport does that in front of
// the SDK, answering a parse error (-32700) or an invalid request
// (-32600) with id null, and passes every good line through untouched.

// StdioTransport returns the transport for `capsule-host mcp`: in and out
// are stdin and stdout, with bad lines answered and skipped.
func StdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	w := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	go guardLines(in, pw, w)
	return &mcp.IOTransport{Reader: pr, Writer: w}
}

// lockedWriter serializes whole writes: the SDK writes one message (with
// its newline) per Write, and so does guardLines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }

// guardLines copies in to pw line by line, answering on out for the lines
// it drops. It ends (closing pw) at in's end or error.
func guardLines(in io.Reader, pw *io.PipeWriter, out io.Writer) {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(br, mcp.DefaultMaxLineLength)
		if t := bytes.TrimSpace(line); len(t) > 0 || tooLong {
			if code, msg := lineProblem(t, tooLong); code != 0 {
				writeRPCError(out, code, msg)
			} else if _, werr := pw.Write(append(t, '\n')); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			pw.CloseWithError(err)
			return
		}
	}
}

// readLine reads one line of at most max bytes; the rest of a longer line
// is read and dropped, and tooLong reports it.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		frag, isPrefix, err := br.ReadLine()
		if !tooLong {
			if len(line)+len(frag) > max {
				tooLong, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if err != nil || !isPrefix {
			return line, tooLong, err
		}
	}
}

// lineProblem says why a line must not reach the SDK (code 0: it may).
func lineProblem(line []byte, tooLong bool) (int64, string) {
	switch {
	case tooLong:
		return jsonrpc.CodeInvalidRequest, "message exceeds the line limit"
	case !json.Valid(line):
		return jsonrpc.CodeParseError, "parse error: the line is not valid JSON"
	case line[0] == '[':
		return 0, "" // a batch: the SDK answers or refuses it
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return jsonrpc.CodeInvalidRequest, "invalid request: " + err.Error()
	}
	return 0, ""
}

func writeRPCError(out io.Writer, code int64, msg string) {
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg}})
	if err != nil {
		return
	}
	_, _ = out.Write(append(b, '\n'))
}

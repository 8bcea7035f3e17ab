package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
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

// StdioTransport returns the transport for a relaying `capsule-host mcp`
// (FileTransport is the daemon's, for a handed-off stdio): in and out
// are stdin and stdout, with bad lines answered and skipped. The lines are
// screened inside the SDK's own reads (guardReader), not by a goroutine
// feeding it through a pipe: one goroutine hand-off less per message.
func StdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	w := &lockedWriter{w: out}
	return &mcp.IOTransport{Reader: &guardReader{br: bufio.NewReaderSize(in, 64<<10), out: w}, Writer: w}
}

// lockedWriter serializes whole writes: the SDK writes one message (with
// its newline) per Write, and so does guardReader.
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

// guardReader hands the SDK stdin line by line, answering on out for the
// lines it drops. Its end is in's end (io.EOF) or error.
type guardReader struct {
	br      *bufio.Reader
	out     io.Writer
	pending []byte // the rest of the good line being read
	err     error
}

func (g *guardReader) Read(p []byte) (int, error) {
	for len(g.pending) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		line, tooLong, err := readLine(g.br, mcp.DefaultMaxLineLength)
		if t := bytes.TrimSpace(line); len(t) > 0 || tooLong {
			code, msg := lineProblem(t, tooLong)
			if code == 0 && t[0] != '[' { // a batch: the SDK answers or refuses it
				if _, err := jsonrpc.DecodeMessage(t); err != nil {
					code, msg = jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error()
				}
			}
			if code != 0 {
				writeRPCError(g.out, code, msg)
			} else {
				g.pending = append(t, '\n')
			}
		}
		if err != nil {
			g.err = err // io.EOF included: the SDK ends the session on it
		}
	}
	n := copy(p, g.pending)
	g.pending = g.pending[n:]
	return n, nil
}

// Close leaves stdin open: a read blocked on it ends with stdin's end,
// and the process ends with its session.
func (g *guardReader) Close() error { return nil }

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

// lineProblem says why a line is no JSON value (code 0: it is one).
func lineProblem(line []byte, tooLong bool) (int64, string) {
	switch {
	case tooLong:
		return jsonrpc.CodeInvalidRequest, "message exceeds the line limit"
	case !json.Valid(line):
		return jsonrpc.CodeParseError, "parse error: the line is not valid JSON"
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

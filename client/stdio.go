package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"syscall"
)

// The stdio hand-off (RFC §19, "Where the server runs"): `capsule-host
// mcp` gives the daemon its own stdin and stdout, so the client's MCP
// session runs in the daemon over the client's pipes, next to the host,
// instead of through a second process that relays every message as an API
// call. On the unix socket only (file descriptors cannot cross TCP):
//
//	POST /mcp?principal=P HTTP/1.1      Upgrade: capsule-host-mcp-stdio
//	                                    body: {} or the session state to resume
//	HTTP/1.1 101 Switching Protocols
//	one byte with SCM_RIGHTS [stdin, stdout]      client -> daemon
//	StdioControl lines (JSON)                     daemon -> client
//
// The connection stays open for the session's life: the daemon closes it
// when the session ends, and the handing process closing it (it died, or
// was told to stop) ends the session.

// StdioUpgrade is the Upgrade token of the stdio hand-off.
const StdioUpgrade = "capsule-host-mcp-stdio"

// StdioControl is one line the daemon sends on a handed-off session's
// connection: the session's state (the initialize handshake, the log
// level) each time it changes, for resuming on the next daemon; and, last,
// End when the session ended for good (the MCP client closed stdin, or
// its stream broke) rather than because the daemon stopped.
type StdioControl struct {
	State json.RawMessage `json:"state,omitempty"`
	End   string          `json:"end,omitempty"`
}

// StdioSession is a handed-off session, seen from the process that handed
// it: its control lines, and Close to end it.
type StdioSession struct {
	f  *os.File
	br *bufio.Reader
}

// ErrStdioNotHandable is the class of a stdin or stdout that cannot be
// handed to the daemon: only pipes and sockets are (a terminal or a file
// is the user's, and stays with the process that was given it).
var ErrStdioNotHandable = errors.New("stdin and stdout must be pipes or sockets to hand them to the daemon")

// Handable reports whether f is a pipe or a socket, the kinds of stdio an
// MCP client gives its servers and the only ones the daemon takes.
func Handable(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	m := fi.Mode()
	return m&os.ModeNamedPipe != 0 || m&os.ModeSocket != 0
}

// HandOffStdio dials the daemon's socket at path and hands it in and out
// for an MCP session acting for principal; state, if not nil, is the
// StdioControl.State last received for this stdio from a daemon that went
// away, so the session goes on where it was. A daemon that answers
// without switching protocols gives an *Error; one that cannot be reached,
// ErrUnreachable.
func HandOffStdio(ctx context.Context, path, principal string, in, out *os.File, state json.RawMessage) (*StdioSession, error) {
	if !Handable(in) || !Handable(out) {
		return nil, ErrStdioNotHandable
	}
	f, err := dialUnix(path)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, path, err)
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	hs := &StdioSession{f: f, br: bufio.NewReaderSize(f, 64<<10)}
	if err := hs.upgrade(path, principal, state); err != nil {
		f.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if err := sendFds(f, in, out); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w at %s: handing over stdin and stdout: %w", ErrUnreachable, path, err)
	}
	return hs, nil
}

// upgrade sends the hand-off request and reads the answer's head: 101, or
// the daemon's error.
func (hs *StdioSession) upgrade(path, principal string, state json.RawMessage) error {
	body := []byte("{}")
	if state != nil {
		body = state
	}
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST /mcp?principal=%s HTTP/1.1\r\nHost: capsule-host\r\nConnection: Upgrade\r\nUpgrade: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", url.QueryEscape(principal), StdioUpgrade, len(body))
	req.Write(body)
	if _, err := hs.f.Write(req.Bytes()); err != nil {
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, path, err)
	}
	status, framing, err := readHeadUpgrade(hs.br)
	if err != nil {
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, path, err)
	}
	if status == 101 {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(framing(hs.br), 1<<20))
	var er ErrorResponse
	if json.Unmarshal(b, &er) != nil || er.Error.Code == "" {
		return &Error{Status: status, Code: CodeInternal, Message: fmt.Sprintf("HTTP %d: %s", status, bytes.TrimSpace(b))}
	}
	return &Error{Status: status, Code: er.Error.Code, Message: er.Error.Message}
}

// sendFds sends one byte carrying in and out (SCM_RIGHTS) on the socket f.
func sendFds(f, in, out *os.File) error {
	fin, err := rawFd(in)
	if err != nil {
		return err
	}
	fout, err := rawFd(out)
	if err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = syscall.Sendmsg(int(fd), []byte{0}, syscall.UnixRights(fin, fout), nil, 0)
		return serr != syscall.EAGAIN
	})
	if err != nil {
		return err
	}
	return serr
}

// rawFd is f's descriptor, read without File.Fd, which would switch a
// pollable file to blocking mode on the description the daemon shares.
func rawFd(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// Next returns the daemon's next control line. io.EOF (or another error)
// means the connection ended: after a StdioControl with End, the session
// is over; without one, the daemon went away (stopped, or died) and the
// session may be handed to the next daemon with the last State.
func (hs *StdioSession) Next() (StdioControl, error) {
	line, err := hs.br.ReadBytes('\n')
	if err != nil {
		return StdioControl{}, err
	}
	var c StdioControl
	if err := json.Unmarshal(line, &c); err != nil {
		return StdioControl{}, fmt.Errorf("%w: a control line of the stdio hand-off: %w", errMalformed, err)
	}
	return c, nil
}

// Close ends the session: the daemon stops serving the handed stdio.
func (hs *StdioSession) Close() error { return hs.f.Close() }

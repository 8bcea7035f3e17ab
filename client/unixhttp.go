package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The unix-socket transport is HTTP/1.1 written by hand on a raw socket:
// one request per connection (Connection: close), a status line, the few
// headers that frame the body (Content-Length, Transfer-Encoding:
// chunked) and the body. It exists for start-up time: linking net/http
// (and net, whose net/netip runs code in package init) made the lean
// client's whole run 2x tmux capture-pane's; see BenchmarkClientVsTmux.
// The daemon side stays net/http.

// errMalformed is an HTTP answer this transport cannot frame.
var errMalformed = errors.New("malformed HTTP answer")

// unixRoundTrip sends one request on a new connection to the socket at
// path and returns the status and the body, which the caller closes.
// Closing the body, or ctx ending, closes the connection.
func unixRoundTrip(ctx context.Context, path, method, target string, hdr []string, body []byte) (int, io.ReadCloser, error) {
	f, err := dialUnix(path)
	if err != nil {
		return 0, nil, err
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	fail := func(err error) (int, io.ReadCloser, error) {
		stop()
		f.Close()
		return 0, nil, err
	}
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: capsule-host\r\nConnection: close\r\n", method, target)
	for _, h := range hdr {
		req.WriteString(h + "\r\n")
	}
	if body != nil || method == "POST" {
		fmt.Fprintf(&req, "Content-Length: %d\r\n", len(body))
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := f.Write(req.Bytes()); err != nil {
		return fail(err)
	}
	br := bufio.NewReaderSize(f, 32<<10)
	status, framing, err := readHead(br)
	if err != nil {
		return fail(err)
	}
	return status, &respBody{r: framing(br), f: f, stop: stop}, nil
}

// dialUnix connects a stream socket to path. The fd is made non-blocking
// after the connect so that os.File reads go through the runtime poller
// (and a Close from another goroutine interrupts them).
func dialUnix(path string) (*os.File, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	for {
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			break
		}
	}
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("connect", err)
	}
	return os.NewFile(uintptr(fd), "unix:"+path), nil
}

// readHead reads the status line and the headers (skipping any 1xx
// answer) and returns the status and how the body is framed.
func readHead(br *bufio.Reader) (int, func(*bufio.Reader) io.Reader, error) {
	return readHeadAt(br, false)
}

// readHeadUpgrade is readHead for a request that asked to switch
// protocols: a 101 answer is returned, not skipped.
func readHeadUpgrade(br *bufio.Reader) (int, func(*bufio.Reader) io.Reader, error) {
	return readHeadAt(br, true)
}

func readHeadAt(br *bufio.Reader, upgrade bool) (int, func(*bufio.Reader) io.Reader, error) {
	for {
		line, err := readLine(br)
		if err != nil {
			return 0, nil, err
		}
		proto, rest, _ := strings.Cut(line, " ")
		code, _, _ := strings.Cut(rest, " ")
		status, err := strconv.Atoi(code)
		if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 || status > 999 {
			return 0, nil, fmt.Errorf("%w: status line %q", errMalformed, line)
		}
		length, chunked := int64(-1), false
		for {
			h, err := readLine(br)
			if err != nil {
				return 0, nil, err
			}
			if h == "" {
				break
			}
			k, v, _ := strings.Cut(h, ":")
			v = strings.TrimSpace(v)
			switch {
			case strings.EqualFold(k, "Content-Length"):
				if length, err = strconv.ParseInt(v, 10, 64); err != nil || length < 0 {
					return 0, nil, fmt.Errorf("%w: Content-Length %q", errMalformed, v)
				}
			case strings.EqualFold(k, "Transfer-Encoding"):
				chunked = strings.EqualFold(v, "chunked")
			}
		}
		if status >= 200 || upgrade && status == 101 {
			return status, framing(chunked, length, status), nil
		}
	}
}

// framing picks the body reader: chunked, Content-Length, none (204,
// 304), else until the connection closes.
func framing(chunked bool, length int64, status int) func(*bufio.Reader) io.Reader {
	switch {
	case chunked:
		return func(br *bufio.Reader) io.Reader { return &chunkedReader{br: br} }
	case status == 204 || status == 304:
		length = 0
	}
	if length >= 0 {
		return func(br *bufio.Reader) io.Reader { return &lengthReader{r: br, left: length} }
	}
	return func(br *bufio.Reader) io.Reader { return br }
}

// readLine reads one CRLF- (or LF-) terminated header line, at most the 32 KiB buffer.
func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return "", fmt.Errorf("%w: a header line over %d bytes", errMalformed, br.Size())
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	return string(bytes.TrimRight(line, "\r\n")), nil
}

// chunkedReader decodes Transfer-Encoding: chunked (RFC 9112 §7.1);
// chunk extensions and trailers are read and ignored.
type chunkedReader struct {
	br   *bufio.Reader
	left int64 // bytes left in the current chunk
	done bool
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	if c.left == 0 {
		line, err := readLine(c.br)
		if err != nil {
			return 0, err
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: chunk size %q", errMalformed, line)
		}
		if n == 0 {
			c.done = true
			for { // trailers, up to the empty line
				if t, err := readLine(c.br); err != nil || t == "" {
					return 0, io.EOF
				}
			}
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if c.left == 0 && err == nil {
		if crlf, e := readLine(c.br); e != nil || crlf != "" {
			return n, fmt.Errorf("%w: no CRLF after a chunk", errMalformed)
		}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// lengthReader reads a Content-Length body: an end before length bytes
// is io.ErrUnexpectedEOF (the daemon died mid-answer), never a short
// body that reads as complete.
type lengthReader struct {
	r    io.Reader
	left int64
}

func (l *lengthReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if err == io.EOF && l.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// respBody closes the connection with the body.
type respBody struct {
	r    io.Reader
	f    *os.File
	stop func() bool
}

func (b *respBody) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *respBody) Close() error {
	b.stop()
	return b.f.Close()
}

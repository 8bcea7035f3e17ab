package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// FileTransport is the transport of a stdio handed off to the daemon: in
// and out are the MCP client's pipes (or sockets), pollable, so closing in
// interrupts a read. With the framing of StdioTransport (one message per
// line, a bad line answered and skipped), but its connection reads and
// decodes each line once, in the SDK's own reading goroutine: the SDK's
// IOTransport decodes every message three times (a stream decoder, a try
// as a batch, then the message) in a goroutine of its own that hands it
// over a channel, which is why it is kept only for the relay's stdin, a
// blocking file no Close interrupts. Batches (protocol versions before
// 2025-06-18) are answered as batches.
func FileTransport(in, out *os.File) mcp.Transport { return fileTransport{in: in, out: out} }

type fileTransport struct{ in, out *os.File }

func (t fileTransport) Connect(context.Context) (mcp.Connection, error) {
	return &fileConn{in: t.in, out: t.out, br: bufio.NewReaderSize(t.in, 64<<10), batches: map[jsonrpc.ID]*batch{}}, nil
}

type fileConn struct {
	in, out *os.File
	br      *bufio.Reader
	queue   []jsonrpc.Message // the rest of a batch (Read only)

	mu      sync.Mutex // whole writes, and batches
	batches map[jsonrpc.ID]*batch
	once    sync.Once
}

// batch collects the responses to one batch's requests, written together
// as one array once the last arrives.
type batch struct {
	ids []jsonrpc.ID
	got map[jsonrpc.ID]*jsonrpc.Response
}

// errBatch is the class of a batch line that cannot be taken.
var errBatch = errors.New("invalid batch")

func (c *fileConn) Read(context.Context) (jsonrpc.Message, error) {
	if len(c.queue) > 0 {
		m := c.queue[0]
		c.queue = c.queue[1:]
		return m, nil
	}
	for {
		line, tooLong, err := readLine(c.br, mcp.DefaultMaxLineLength)
		if t := bytes.TrimSpace(line); len(t) > 0 || tooLong {
			code, msg := lineProblem(t, tooLong)
			if code == 0 {
				m, derr := c.decode(t)
				if derr == nil {
					return m, nil
				}
				code, msg = jsonrpc.CodeInvalidRequest, "invalid request: "+derr.Error()
			}
			c.mu.Lock()
			writeRPCError(c.out, code, msg)
			c.mu.Unlock()
		}
		if err != nil {
			return nil, err
		}
	}
}

// decode decodes one line: a message, or a batch (its first message).
func (c *fileConn) decode(line []byte) (jsonrpc.Message, error) {
	if line[0] == '[' {
		return c.readBatch(line)
	}
	return jsonrpc.DecodeMessage(line)
}

// readBatch decodes a batch, records its requests' IDs for the answer and
// returns its first message (the rest are queued).
func (c *fileConn) readBatch(line []byte) (jsonrpc.Message, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(line, &raws); err != nil || len(raws) == 0 {
		return nil, fmt.Errorf("%w: an empty batch or not an array", errBatch)
	}
	msgs := make([]jsonrpc.Message, 0, len(raws))
	b := &batch{got: map[jsonrpc.ID]*jsonrpc.Response{}}
	for _, r := range raws {
		m, err := jsonrpc.DecodeMessage(r)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBatch, err)
		}
		if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
			for _, id := range b.ids {
				if id == req.ID {
					return nil, fmt.Errorf("%w: request ID %v twice", errBatch, id.Raw())
				}
			}
			b.ids = append(b.ids, req.ID)
		}
		msgs = append(msgs, m)
	}
	c.mu.Lock()
	for _, id := range b.ids {
		if c.batches[id] != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: request ID %v is still being answered", errBatch, id.Raw())
		}
	}
	for _, id := range b.ids {
		c.batches[id] = b
	}
	c.mu.Unlock()
	c.queue = msgs[1:]
	return msgs[0], nil
}

func (c *fileConn) Write(_ context.Context, m jsonrpc.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := m.(*jsonrpc.Response); ok {
		if b := c.batches[r.ID]; b != nil {
			delete(c.batches, r.ID)
			b.got[r.ID] = r
			if len(b.got) < len(b.ids) {
				return nil
			}
			return c.writeBatch(b)
		}
	}
	data, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		return err
	}
	_, err = c.out.Write(append(data, '\n'))
	return err
}

// writeBatch writes a batch's responses as one array, in request order.
func (c *fileConn) writeBatch(b *batch) error {
	buf := []byte{'['}
	for i, id := range b.ids {
		data, err := jsonrpc.EncodeMessage(b.got[id])
		if err != nil {
			return err
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, data...)
	}
	_, err := c.out.Write(append(buf, ']', '\n'))
	return err
}

// Close interrupts a read (in is pollable); out is the caller's to close.
func (c *fileConn) Close() error {
	c.once.Do(func() { _ = c.in.Close() })
	return nil
}

func (c *fileConn) SessionID() string { return "" }

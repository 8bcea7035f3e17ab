package keeper

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

const (
	// MaxFrame bounds a frame's body. A larger declared length drops the
	// peer before a byte of the body is read: a length is a promise the
	// reader would otherwise have to buffer.
	MaxFrame = 8 << 20
	// MaxRead bounds the data of one read or drain: base64 makes 4 MiB
	// about 5.4 MiB of JSON, inside MaxFrame with room for the rest.
	MaxRead = 4 << 20
	// maxStdinChunk is how much one write_stdin frame carries; the client
	// splits larger writes.
	maxStdinChunk = 1 << 20
)

// readFrame reads one frame. The wait for a frame's first byte is
// unbounded (an idle client is fine), but once it arrived the rest must
// come within timeout: a peer that stops mid-frame is dropped instead of
// holding a goroutine and a buffer forever. The body buffer grows with
// the bytes that actually arrive, not with the declared length.
func readFrame(nc net.Conn, r io.Reader, timeout time.Duration) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return nil, err
	}
	if timeout > 0 {
		nc.SetReadDeadline(time.Now().Add(timeout))
		defer nc.SetReadDeadline(time.Time{})
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return nil, fmt.Errorf("frame header: %w: %w", ErrProtocol, err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxFrame {
		return nil, fmt.Errorf("frame length %d outside [1, %d]: %w", n, MaxFrame, ErrProtocol)
	}
	var body bytes.Buffer
	body.Grow(int(min(n, 64<<10)))
	if _, err := io.CopyN(&body, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the peer left mid-frame: a fault, not a goodbye
		}
		return nil, fmt.Errorf("frame body (%d of %d bytes): %w: %w", body.Len(), n, ErrProtocol, err)
	}
	return body.Bytes(), nil
}

// writeFrame writes one frame in a single write, so concurrent writers
// (serialised by the caller) never interleave, within timeout: a peer
// that does not read its responses is dropped.
func writeFrame(nc net.Conn, body []byte, timeout time.Duration) error {
	if len(body) == 0 || len(body) > MaxFrame {
		return fmt.Errorf("frame of %d bytes outside [1, %d]: %w", len(body), MaxFrame, ErrProtocol)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	if timeout > 0 {
		nc.SetWriteDeadline(time.Now().Add(timeout))
		defer nc.SetWriteDeadline(time.Time{})
	}
	_, err := nc.Write(buf)
	return err
}

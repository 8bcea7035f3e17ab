//go:build wasmtime

package wasmtime

import (
	"context"
	"encoding/binary"

	"github.com/capsule-host/capsule-host/host/engine"
)

// WASI errno values (preview1) fd_write can return.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoIO      = 29
)

// fdWrite is WASI preview1 fd_write(fd, iovs, iovs_len, nwritten) for
// fds 1 and 2, written synchronously to the instance's writers, one Write
// per iovec, as wazero does. Any other fd is EBADF: there are no preopens
// and stdin is not writable.
func fdWrite(_ context.Context, c engine.Caller, s []uint64) {
	in := c.(*instance)
	var w interface{ Write([]byte) (int, error) }
	switch uint32(s[0]) {
	case 1:
		w = in.stdout
	case 2:
		w = in.stderr
	default:
		s[0] = errnoBadf
		return
	}
	mem := memory{in}
	iovs, n, resultPtr := uint32(s[1]), uint32(s[2]), uint32(s[3])
	var total uint32
	for i := uint32(0); i < n; i++ {
		iov, ok := mem.Read(iovs+i*8, 8)
		if !ok {
			s[0] = errnoFault
			return
		}
		p, l := binary.LittleEndian.Uint32(iov), binary.LittleEndian.Uint32(iov[4:])
		b, ok := mem.Read(p, l)
		if !ok {
			s[0] = errnoFault
			return
		}
		if w != nil && l > 0 {
			if _, err := w.Write(b); err != nil {
				s[0] = errnoIO
				return
			}
		}
		total += l
	}
	var out [4]byte
	binary.LittleEndian.PutUint32(out[:], total)
	if !mem.Write(resultPtr, out[:]) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

//go:build wasmtime

package wasmtime

import (
	"errors"

	"github.com/capsule-host/capsule-host/internal/leb128"
)

// definedMemoryMinimums returns the minimum page count of every memory a
// module defines (section 5), exported or not: wasmtime's Module API only
// shows exported and imported memories, and the memory limit must refuse
// at compile time any memory that starts above it, as wazero does. The
// module has already been validated by wasmtime when this runs.
func definedMemoryMinimums(wasm []byte) ([]uint64, error) {
	if len(wasm) < 8 {
		return nil, errShort
	}
	p := wasm[8:]
	for len(p) > 0 {
		id := p[0]
		size, n, err := uleb(p[1:])
		if err != nil {
			return nil, err
		}
		p = p[1+n:]
		if uint64(len(p)) < size {
			return nil, errShort
		}
		body := p[:size]
		p = p[size:]
		if id != 5 {
			continue
		}
		count, n, err := uleb(body)
		if err != nil {
			return nil, err
		}
		body = body[n:]
		var mins []uint64
		for i := uint64(0); i < count; i++ {
			if len(body) == 0 {
				return nil, errShort
			}
			flags := body[0]
			min, n, err := uleb(body[1:])
			if err != nil {
				return nil, err
			}
			body = body[1+n:]
			if flags&1 != 0 { // has max
				_, n, err := uleb(body)
				if err != nil {
					return nil, err
				}
				body = body[n:]
			}
			mins = append(mins, min)
		}
		return mins, nil
	}
	return nil, nil
}

var errShort = errors.New("wasm: truncated section")

// uleb reads a LEB128 of up to 64 bits (memory64 limits); any fault is
// errShort, as the module is already valid.
func uleb(b []byte) (v uint64, n int, err error) {
	v, n, err = leb128.Unsigned(b, 64)
	if err != nil {
		return 0, 0, errShort
	}
	return v, n, nil
}

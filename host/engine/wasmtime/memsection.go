//go:build wasmtime

package wasmtime

import "errors"

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

func uleb(b []byte) (v uint64, n int, err error) {
	var shift uint
	for i, c := range b {
		if i == 10 {
			break
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, i + 1, nil
		}
		shift += 7
	}
	return 0, 0, errShort
}

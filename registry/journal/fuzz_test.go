package journal

import (
	"bytes"
	"testing"
)

// FuzzDecodeProcess: the process decoder never panics, and whatever it
// accepts is exactly the encoding of what it returns (strict: one
// spelling per record). sealed=true fixes the checksum up so the fuzzer
// reaches the JSON and validation layers instead of stopping at the CRC.
func FuzzDecodeProcess(f *testing.F) {
	for i := range 6 {
		p := sample(i)
		v, _ := EncodeProcess(p)
		f.Add(p.Key[:], v[4:], true)
		f.Add(p.Key[:], v, false)
	}
	f.Add(make([]byte, 32), []byte(`{"v":1}`), true)
	f.Add(make([]byte, 32), []byte(`{"v":2,"x":[]}`), true)
	f.Fuzz(func(t *testing.T, key, data []byte, sealed bool) {
		val := data
		if sealed {
			val = sealRaw(key, string(data))
		}
		p, err := DecodeProcess(key, val)
		if err != nil {
			return
		}
		again, err := EncodeProcess(p)
		if err != nil {
			t.Fatalf("decoded a record that does not encode: %v", err)
		}
		if !bytes.Equal(again, val) {
			t.Fatalf("accepted a non-canonical record:\n in %q\nout %q", val, again)
		}
	})
}

// FuzzDecodeScope is FuzzDecodeProcess for scope and meta records.
func FuzzDecodeScope(f *testing.F) {
	o := Owner{Capsule: "c", Principal: "p", Fallback: true}
	v, _ := encodeScope(o, 7)
	f.Add(scopeKey(o), v[4:], true)
	mv, _ := encodeMeta(meta{Format: formatVersion})
	f.Add([]byte(keyMeta), mv[4:], true)
	f.Fuzz(func(t *testing.T, key, data []byte, sealed bool) {
		val := data
		if sealed {
			val = sealRaw(key, string(data))
		}
		if o, next, err := decodeScope(key, val); err == nil {
			again, err := encodeScope(o, next)
			if err != nil || !bytes.Equal(again, val) {
				t.Fatalf("scope: accepted a non-canonical record %q (%v)", val, err)
			}
		}
		if m, err := decodeMeta("fuzz", val); err == nil {
			again, err := encodeMeta(m)
			if err != nil || !bytes.Equal(again, val) {
				t.Fatalf("meta: accepted a non-canonical record %q (%v)", val, err)
			}
		}
	})
}

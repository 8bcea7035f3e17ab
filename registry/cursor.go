package registry

import (
	"crypto/subtle"
	"encoding/binary"

	"golang.org/x/crypto/blake2b"
)

// Cursor tokens for read-since. A token is opaque to the guest:
//
//	version(1) | stream(1) | offset(8, big endian) | mac(16)
//
// encoded like IDs (lowercase base32, no padding: 42 characters). The MAC
// is a blake2b-128 keyed with a per-registry secret over the process key,
// the stream and the offset, so a token is only valid for the process and
// stream it was issued for: a forged, altered or foreign token (another
// process, another stream, another host run) fails exactly like a
// malformed one.
const (
	cursorVersion = 1
	cursorRawLen  = 1 + 1 + 8 + 16
)

func (r *Registry) cursorMAC(k procKey, s Stream, off uint64, out []byte) {
	h, _ := blake2b.New(16, r.macKey[:])
	var b [32 + 1 + 1 + 8]byte
	copy(b[:32], k[:])
	b[32] = cursorVersion
	b[33] = byte(s)
	binary.BigEndian.PutUint64(b[34:], off)
	h.Write(b[:])
	h.Sum(out[:0])
}

// encodeCursor issues the token for offset off of stream s of process k.
func (r *Registry) encodeCursor(k procKey, s Stream, off int64) string {
	var raw [cursorRawLen]byte
	raw[0] = cursorVersion
	raw[1] = byte(s)
	binary.BigEndian.PutUint64(raw[2:10], uint64(off))
	var mac [16]byte
	r.cursorMAC(k, s, uint64(off), mac[:])
	copy(raw[10:], mac[:])
	return idEncoding.EncodeToString(raw[:])
}

// decodeCursor returns the offset a token names, or ok=false for anything
// the registry did not issue for this process and stream.
func (r *Registry) decodeCursor(k procKey, s Stream, tok string) (int64, bool) {
	if len(tok) != idEncoding.EncodedLen(cursorRawLen) {
		return 0, false
	}
	raw, err := idEncoding.DecodeString(tok)
	if err != nil || len(raw) != cursorRawLen || raw[0] != cursorVersion || raw[1] != byte(s) {
		return 0, false
	}
	off := binary.BigEndian.Uint64(raw[2:10])
	var mac [16]byte
	r.cursorMAC(k, s, off, mac[:])
	if subtle.ConstantTimeCompare(mac[:], raw[10:]) != 1 || off > 1<<62 {
		return 0, false
	}
	return int64(off), true
}

package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
)

// Records are stored as
//
//	crc32c(key || body) (4 bytes, big endian) | body
//
// where body is the record as JSON with a "v" (schema version) field.
//
// Why JSON: the records are small and every write is dominated by its
// fsync, so a compact binary form would buy nothing measurable, while JSON
// is explicit (every field is named on disk), readable with bbolt's own
// tools when an operator has to look, and in the standard library. Why
// strict: decoding accepts exactly what this build writes — the body must
// be the canonical encoding of the record it decodes to (re-encoding gives
// the same bytes), which rules out unknown fields, duplicate or
// differently-cased keys, trailing data and invalid UTF-8; anything else
// is a typed error, never a guess. Why a checksum: bbolt checksums only its
// meta pages, so a flipped byte inside a value would otherwise decode into
// a plausible wrong record (another exit code, another deadline); the key
// is covered too, so a record cannot silently move to another process.

// procVersion, scopeVersion and metaVersion are the schema versions this
// build writes and reads.
const (
	procVersion  = 1
	scopeVersion = 1
	metaVersion  = 1
)

// maxRecord bounds one record's body: the largest real one is a few KiB.
const maxRecord = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(key, body []byte) uint32 {
	c := crc32.Update(0, castagnoli, key)
	return crc32.Update(c, castagnoli, body)
}

// seal marshals a wire record into a stored value.
func seal(key []byte, w any) ([]byte, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	if len(body) > maxRecord {
		return nil, fmt.Errorf("record is %d bytes (max %d)", len(body), maxRecord)
	}
	out := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(out, checksum(key, body))
	return append(out, body...), nil
}

// unseal checks a stored value's checksum and returns its body and schema
// version.
func unseal(key, val []byte) ([]byte, int, error) {
	if len(val) < 4 {
		return nil, 0, fmt.Errorf("%w: %d bytes, shorter than the checksum", ErrMalformed, len(val))
	}
	body := val[4:]
	if len(body) > maxRecord {
		return nil, 0, fmt.Errorf("%w: body is %d bytes (max %d)", ErrMalformed, len(body), maxRecord)
	}
	if got, want := checksum(key, body), binary.BigEndian.Uint32(val); got != want {
		return nil, 0, fmt.Errorf("%w: stored %08x, computed %08x", ErrChecksum, want, got)
	}
	var h struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return nil, 0, fmt.Errorf("%w: not a JSON object: %v", ErrMalformed, err)
	}
	if h.V == nil {
		return nil, 0, fmt.Errorf("%w: no version field \"v\"", ErrMalformed)
	}
	return body, *h.V, nil
}

// strictJSON decodes body into w, refusing unknown fields (the precise
// message; canonical() is the complete check).
func strictJSON(body []byte, w any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(w); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// canonical refuses a body that is not exactly what encoding the decoded
// record gives back.
func canonical(key, val []byte, reencode func() ([]byte, error)) error {
	again, err := reencode()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !bytes.Equal(again, val) {
		return fmt.Errorf("%w: not in canonical form (differs from its re-encoding at byte %d)", ErrMalformed, firstDiff(again, val))
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// versionErr is the error for a record of an unknown schema version.
func versionErr(found, want int) error {
	return fmt.Errorf("%w %d (this build reads %d)", ErrUnknownVersion, found, want)
}

// invalid wraps a validation failure for a write (ErrInvalid) or a read
// (ErrMalformed).
func invalid(kind, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrMalformed) {
		return err
	}
	return fmt.Errorf("%w: %v", kind, err)
}

package registry

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"hash"
	"sync"

	"golang.org/x/crypto/blake2b"
)

// idEncoding is RFC 4648 base32, lowercase, no padding: 32 bytes → 52
// characters of [a-z2-7], a valid topic/path suffix everywhere.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// idLen is the wire length of every process ID.
const idLen = 52

// procKey is the keyed hash of an ID: the only form the registry indexes
// by and logs (as short). A persistent record still holds its raw ID in
// memory, because status, list and events answer with it; it is never
// written to disk or to a log.
type procKey [32]byte

// newRawID draws 256 bits from the OS CSPRNG.
func newRawID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("%w: reading the CSPRNG: %v", ErrInternal, err)
	}
	return idEncoding.EncodeToString(b[:]), nil
}

// keyOf hashes any string, well-formed or not, so a lookup of a malformed
// ID costs the same as one of a real ID (no timing oracle for the format).
// It allocates nothing (BenchmarkKeyOf): every call of an owner's
// process pays it, and New256 allocated the hash state and []byte(id) a
// copy each time, so the state is pooled with its scratch space.
func (r *Registry) keyOf(id string) procKey {
	kh, _ := keyHashers.Get().(*keyHasher)
	if kh == nil || kh.key != r.hashKey { // none yet, or another registry's key
		kh = &keyHasher{key: r.hashKey}
		kh.h, _ = blake2b.New256(kh.key[:]) // key is 32 bytes: never fails
	} else {
		kh.h.Reset() // back to the keyed initial state
	}
	kh.buf = append(kh.buf[:0], id...)
	kh.h.Write(kh.buf)
	var k procKey
	copy(k[:], kh.h.Sum(kh.sum[:0]))
	if cap(kh.buf) <= maxPooledID {
		keyHashers.Put(kh)
	}
	return k
}

// keyHasher is a keyed blake2b state with the scratch space of one
// keyOf; maxPooledID keeps a huge malformed ID's buffer out of the pool.
type keyHasher struct {
	key [32]byte
	h   hash.Hash
	buf []byte
	sum [32]byte
}

const maxPooledID = 1 << 10

var keyHashers sync.Pool

// short is the log form of a key: 48 bits of a secret-keyed hash, enough
// to correlate log lines, useless to recover or guess the ID.
func (k procKey) short() string { return hex.EncodeToString(k[:6]) }

// ValidPrincipal is the principal grammar, the one the host and the
// registry share: 1..128 bytes of [A-Za-z0-9._@:_-], starting with a
// letter or digit (so "." and ".." and hidden names are impossible: the
// name doubles as a directory name). A refusal is a *PrincipalError.
func ValidPrincipal(p string) error {
	if len(p) == 0 || len(p) > 128 {
		return &PrincipalError{Reason: fmt.Sprintf("principal must be 1..128 bytes, got %d", len(p))}
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || (i > 0 && (c == '.' || c == '_' || c == '@' || c == ':' || c == '-')) {
			continue
		}
		return &PrincipalError{Reason: fmt.Sprintf("principal %q: byte %d (%q) is outside [A-Za-z0-9][A-Za-z0-9._@:_-]*", p, i, c)}
	}
	return nil
}

// PrincipalError is a principal outside the grammar: ErrInvalidInput to
// the registry's callers. Reason says what is wrong, so the host can
// report it under its own class (host.ErrInvalidPrincipal).
type PrincipalError struct{ Reason string }

func (e *PrincipalError) Error() string { return ErrInvalidInput.Error() + ": " + e.Reason }
func (e *PrincipalError) Unwrap() error { return ErrInvalidInput }

// validCapsuleName bounds capsule names the same way (they appear in logs
// and operator views).
func validCapsuleName(n string) error {
	if err := ValidPrincipal(n); err != nil {
		return fmt.Errorf("%w: capsule name %q: must match the principal grammar", ErrInvalidInput, n)
	}
	return nil
}

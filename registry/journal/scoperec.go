package journal

import (
	"bytes"
	"fmt"
	"strings"
)

// scopeV1 is a scope's event sequence on disk: NextSeq is the seq of the
// next event, so the registry's numbering continues after a restart
// instead of starting over at 1 (a guest's cursor would then skip or
// repeat events).
type scopeV1 struct {
	V         int    `json:"v"`
	Capsule   string `json:"capsule"`
	Principal string `json:"principal"`
	Fallback  bool   `json:"fallback"`
	NextSeq   uint64 `json:"next_seq"`
}

// formatVersion is the bucket layout this build reads and writes.
const formatVersion = 1

// Bucket and key names.
const (
	bucketMeta   = "meta"
	bucketProcs  = "procs"
	bucketScopes = "scopes"
	keyMeta      = "meta"
)

// scopeKey is a scope's bucket key: capsule NUL principal NUL ('p' | 'f').
// Names cannot hold NUL (validOwner), so the form is unambiguous.
func scopeKey(o Owner) []byte {
	kind := "p"
	if o.Fallback {
		kind = "f"
	}
	return []byte(o.Capsule + "\x00" + o.Principal + "\x00" + kind)
}

// validOwner: non-empty names without NUL, valid UTF-8, at most 255 bytes.
func validOwner(o Owner) error {
	for _, f := range [...]struct{ name, s string }{{"capsule", o.Capsule}, {"principal", o.Principal}} {
		if len(f.s) == 0 || len(f.s) > 255 || strings.IndexByte(f.s, 0) >= 0 {
			return fmt.Errorf("%s name must be 1..255 bytes without NUL, got %d bytes", f.name, len(f.s))
		}
		if err := validString(f.name, f.s, 1); err != nil {
			return err
		}
	}
	return nil
}

func encodeScope(o Owner, next uint64) ([]byte, error) {
	if err := validOwner(o); err != nil {
		return nil, invalid(ErrInvalid, err)
	}
	if next == 0 {
		return nil, fmt.Errorf("%w: next seq 0 (sequences start at 1)", ErrInvalid)
	}
	return seal(scopeKey(o), scopeV1{V: scopeVersion, Capsule: o.Capsule, Principal: o.Principal, Fallback: o.Fallback, NextSeq: next})
}

// decodeScope decodes a scope record strictly; its key must be the one
// its owner gives.
func decodeScope(key, val []byte) (Owner, uint64, error) {
	body, v, err := unseal(key, val)
	if err != nil {
		return Owner{}, 0, err
	}
	if v != scopeVersion {
		return Owner{}, 0, versionErr(v, scopeVersion)
	}
	var w scopeV1
	if err := strictJSON(body, &w); err != nil {
		return Owner{}, 0, err
	}
	o := Owner{Capsule: w.Capsule, Principal: w.Principal, Fallback: w.Fallback}
	if err := validOwner(o); err != nil {
		return Owner{}, 0, invalid(ErrMalformed, err)
	}
	if !bytes.Equal(key, scopeKey(o)) {
		return Owner{}, 0, fmt.Errorf("%w: key does not match the scope it holds", ErrMalformed)
	}
	if w.NextSeq == 0 {
		return Owner{}, 0, fmt.Errorf("%w: next seq 0", ErrMalformed)
	}
	if err := canonical(key, val, func() ([]byte, error) { return encodeScope(o, w.NextSeq) }); err != nil {
		return Owner{}, 0, err
	}
	return o, w.NextSeq, nil
}

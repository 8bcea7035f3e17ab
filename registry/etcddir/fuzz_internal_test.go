package etcddir

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/capsule-host/capsule-host/registry"
)

// FuzzDecodeRecord decodes a value under the directory's keys as every
// reader does (decode into each of the four record types, parseScope for
// counts). Properties: nothing panics; a refusal is a
// *registry.DirRecordError naming the key (ErrInternal); a value that
// decodes is exactly one JSON value (nothing trails it) and re-encodes
// (json.Marshal, what Publish and the count writes use) to a form that
// decodes to the same record. Seeds are the values the writers produce.
func FuzzDecodeRecord(f *testing.F) {
	own := registry.DirScope{Capsule: "shell", Principal: "alice"}
	for _, v := range []any{
		procValue{Owner: own, Node: "n1", Label: "build"},
		scopeCount{DirHolding: registry.DirHolding{Running: 2, Retained: 1}, Owner: own},
		NodeRecord{Name: "n1", Address: "10.0.0.1:7000", Capacity: 64, Version: "v1", Started: time.Date(2026, 12, 2, 15, 0, 0, 5, time.UTC)},
		loadValue{Running: 3, Retained: 1},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"running":-1,"retained":0,"owner":{"capsule":"c","principal":"p"}}`))
	d := &Dir{prefix: "/ch/"}
	f.Fuzz(func(t *testing.T, val []byte) {
		key := []byte("/ch/scopes/k/n/n1")
		decodeAs[procValue](t, key, val)
		decodeAs[NodeRecord](t, key, val)
		decodeAs[loadValue](t, key, val)
		decodeAs[scopeCount](t, key, val)
		st, err := d.parseScope("k", nil, []*mvccpb.KeyValue{{Key: key, Value: val}})
		if err != nil {
			checkRecordErr(t, key, err)
		} else if h := st.nodes["n1"]; h.Running < 0 || h.Retained < 0 {
			t.Fatalf("negative count accepted: %+v", h)
		}
	})
}

func decodeAs[T any](t *testing.T, key, val []byte) {
	var v T
	if err := decode(key, val, &v); err != nil {
		checkRecordErr(t, key, err)
		return
	}
	if !json.Valid(val) {
		t.Fatalf("%T accepted from a value that is not one JSON value: %q", v, val)
	}
	b1, err := json.Marshal(v)
	if err != nil {
		return // a time outside years 0-9999 after its offset: never written by us
	}
	var w T
	if err := decode(key, b1, &w); err != nil {
		t.Fatalf("our own encoding of %T does not decode: %v\n%s", v, err, b1)
	}
	if b2, _ := json.Marshal(w); !bytes.Equal(b1, b2) {
		t.Fatalf("round trip changed the %T:\n%s\n%s", v, b1, b2)
	}
}

func checkRecordErr(t *testing.T, key []byte, err error) {
	var re *registry.DirRecordError
	if !errors.As(err, &re) || re.Key != string(key) || !errors.Is(err, registry.ErrInternal) {
		t.Fatalf("refusal is not a DirRecordError naming %q: %T %v", key, err, err)
	}
}

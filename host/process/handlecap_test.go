package process

import (
	"errors"
	"testing"

	"github.com/capsule-host/capsule-host/registry"
)

// A full handle table is a typed quota error, seen before any spawn
// (room) and at the insert (add), and the guest gets error-code quota in
// both versions; dropping a handle makes room again.
func TestHandleTableCap(t *testing.T) {
	i := &Instance{MaxHandles: 2}
	var idx []uint32
	for n := 0; n < 2; n++ {
		if err := i.room(); err != nil {
			t.Fatalf("handle %d: room: %v", n, err)
		}
		x, err := i.add(ver11.rt, &registry.Handle{})
		if err != nil {
			t.Fatal(err)
		}
		idx = append(idx, x)
	}
	errRoom, errAdd := i.room(), func() error { _, err := i.add(ver11.rt, &registry.Handle{}); return err }()
	for _, err := range []error{errRoom, errAdd} {
		var hl *HandleLimitError
		if !errors.As(err, &hl) || hl.Limit != 2 || !errors.Is(err, ErrHandleLimit) || !errors.Is(err, registry.ErrQuota) {
			t.Fatalf("full table: %v", err)
		}
		for _, v := range []*version{ver10, ver11, ver12} {
			if c := errorCode(err, v.errorCode, v.v11); v.errorCode.Cases()[c.Case].Name != "quota" {
				t.Errorf("v11=%v: case %s, want quota", v.v11, v.errorCode.Cases()[c.Case].Name)
			}
		}
	}
	if i.Handles() != 2 {
		t.Fatalf("handles %d after refusals", i.Handles())
	}
	if _, err := i.remove(ver11.rt, idx[0]); err != nil {
		t.Fatal(err)
	}
	if err := i.room(); err != nil {
		t.Errorf("after a drop: %v", err)
	}
	if (&Instance{}).maxHandles() != DefaultMaxHandles {
		t.Error("zero MaxHandles is not the default")
	}
}

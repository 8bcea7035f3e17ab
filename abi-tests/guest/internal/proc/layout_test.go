package proc

import (
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/abi-tests/internal/witsrc"
	"go.bytecodealliance.org/wit"
)

// TestGuestLayouts checks every hand-derived size, alignment and field
// offset of this binding against go.bytecodealliance.org/wit's Canonical
// ABI layouts of the frozen WIT, so the end-to-end guests test the host
// with layouts a third party agrees with.
func TestGuestLayouts(t *testing.T) {
	res, err := witsrc.Load("../../..")
	if err != nil {
		t.Fatal(err)
	}
	ifaces := map[string]*wit.Interface{}
	for _, i := range witsrc.Interfaces(res, "capsule:process") {
		ifaces[witsrc.InterfaceID(i)] = i
	}
	v11 := ifaces["capsule:process/host@1.1.0"]
	v10 := ifaces["capsule:process/host@1.0.0"]
	if v11 == nil || v10 == nil {
		t.Fatalf("missing interfaces: %v", ifaces)
	}
	typ := func(i *wit.Interface, name string) *wit.TypeDef {
		td, ok := i.TypeDefs.GetOK(name)
		if !ok {
			t.Fatalf("%s has no type %s", witsrc.InterfaceID(i), name)
		}
		return td
	}
	checked := 0
	for k, want := range Offsets {
		var got uintptr
		switch {
		case strings.HasSuffix(k, "/align"):
			got = typ(v11, strings.TrimSuffix(k, "/align")).Align()
		case strings.Contains(k, "."):
			name, field, _ := strings.Cut(k, ".")
			rec, ok := typ(v11, name).Kind.(*wit.Record)
			if !ok {
				t.Errorf("%s is not a record", name)
				continue
			}
			found := false
			var off uintptr
			for _, f := range rec.Fields {
				off = wit.Align(off, f.Type.Align())
				if f.Name == field {
					got, found = off, true
					break
				}
				off += f.Type.Size()
			}
			if !found {
				t.Errorf("%s has no field %s", name, field)
				continue
			}
		default:
			got = typ(v11, k).Size()
		}
		checked++
		if got != uintptr(want) {
			t.Errorf("layout %s: binding says %d, go.bytecodealliance.org/wit says %d", k, want, got)
		}
	}
	// Every record field of the types used must be in the table.
	for _, name := range []string{"exit-info", "process-result", "read-logs-result", "env-var", "spawn-request",
		"resource-limits", "persist-options", "log-chunk", "process-info", "exit-event", "process-event", "event-batch"} {
		for _, f := range typ(v11, name).Kind.(*wit.Record).Fields {
			if _, ok := Offsets[name+"."+f.Name]; !ok {
				t.Errorf("layout table lacks %s.%s", name, f.Name)
			}
		}
	}
	// The records shared by both versions have the same layout in 1.0.0.
	for _, name := range []string{"exit-info", "process-result", "read-logs-result", "env-var", "spawn-request"} {
		if a, b := typ(v10, name).Size(), typ(v11, name).Size(); a != b {
			t.Errorf("%s: 1.0.0 size %d, 1.1.0 size %d", name, a, b)
		}
	}
	for _, c := range []struct {
		l Layout
		i *wit.Interface
	}{{Layout10, v10}, {Layout11, v11}} {
		ec := typ(c.i, "error-code")
		if uintptr(c.l.ErrAlign) != ec.Align() || uintptr(c.l.ErrSize) != ec.Size() || c.l.ErrPayload != c.l.ErrAlign {
			t.Errorf("%s error-code: binding align %d size %d payload %d, wit align %d size %d",
				witsrc.InterfaceID(c.i), c.l.ErrAlign, c.l.ErrSize, c.l.ErrPayload, ec.Align(), ec.Size())
		}
	}
	// Option and variant payload offsets: a 1-byte discriminant, then the
	// payload at its alignment.
	pi := typ(v11, "process-info").Kind.(*wit.Record)
	for _, f := range pi.Fields {
		opt, ok := f.Type.(*wit.TypeDef)
		if !ok {
			continue
		}
		o, ok := opt.Kind.(*wit.Option)
		if !ok {
			continue
		}
		want := map[uintptr]uint32{4: optU32Val, 8: optU64Val, 1: 1}[o.Type.Align()]
		if f.Name == "exit" {
			want = optExitVal
		}
		if got := wit.Align(1, o.Type.Align()); got != uintptr(want) {
			t.Errorf("process-info.%s: option payload at %d, binding uses %d", f.Name, got, want)
		}
	}
	if got := wit.Align(1, typ(v11, "exit-event").Align()); got != eventKindVal {
		t.Errorf("event-kind payload at %d, binding uses %d", got, eventKindVal)
	}
	t.Logf("checked %d layout entries", checked)
}

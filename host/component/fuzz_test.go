package component

import (
	"errors"
	"testing"
)

// FuzzParse: Parse never panics, and every refusal is a *Error of one of
// the two classes with an offset inside the input.
func FuzzParse(f *testing.F) {
	f.Add(compHeader)
	f.Add(liftWith(0x00, 0x03, 0x00))
	f.Add(liftWith(0x01))
	f.Add(comp(sec(secComponent, comp(sec(secAlias, vec(cat([]byte{0x03, 0x02}, leb(1), leb(0))))))))
	f.Add(comp(instanceImport("capsule:process/host@1.1.0")))
	f.Add(comp(sec(secType, vec([]byte{0x72, 0x02, 0x01, 'a', 0x79, 0x01, 'b', 0x73}, []byte{0x42, 0x01, 0x04, 0x00, 0x01, 'r', 0x03, 0x01}))))
	f.Add(comp(sec(secCoreType, vec([]byte{0x50, 0x02, 0x01, 0x60, 0x00, 0x00, 0x00, 0x01, 'm', 0x01, 'f', 0x00, 0x00}))))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil {
			if c == nil {
				t.Fatal("nil component without an error")
			}
			_ = Explain(c, []string{"capsule:process/host@1.1.0"})
			return
		}
		var e *Error
		if !errors.As(err, &e) || !(errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnsupported)) {
			t.Fatalf("unclassified error %T: %v", err, err)
		}
		if e.Offset < 0 || e.Offset > len(b) {
			t.Fatalf("offset %d outside the %d-byte input: %v", e.Offset, len(b), err)
		}
		_ = err.Error()
	})
}

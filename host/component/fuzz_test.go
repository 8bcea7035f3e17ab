package component

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/process"
	"github.com/capsule-host/capsule-host/internal/leb128"
)

// FuzzParse: Parse never panics, and every refusal is a *Error of one of
// the two classes with an offset inside the input. A component that
// parses also goes through the WIT-level check against the host's real
// signatures and has every decoded type described (bounded, however the
// types are shared), and the check's refusals are typed too. Seeds
// include a real wit-component binary (the dummy capsule).
func FuzzParse(f *testing.F) {
	f.Add(compHeader)
	f.Add(liftWith(0x00, 0x03, 0x00))
	f.Add(liftWith(0x01))
	f.Add(comp(sec(secComponent, comp(sec(secAlias, vec(cat([]byte{0x03, 0x02}, leb(1), leb(0))))))))
	f.Add(comp(instanceImport("capsule:process/host@1.1.0")))
	f.Add(comp(sec(secType, vec([]byte{0x72, 0x02, 0x01, 'a', 0x79, 0x01, 'b', 0x73}, []byte{0x42, 0x01, 0x04, 0x00, 0x01, 'r', 0x03, 0x01}))))
	f.Add(comp(sec(secCoreType, vec([]byte{0x50, 0x02, 0x01, 0x60, 0x00, 0x00, 0x00, 0x01, 'm', 0x01, 'f', 0x00, 0x00}))))
	if b, err := os.ReadFile("testdata/wit/dummy-capsule.wasm"); err == nil {
		f.Add(b)
	}
	f.Add(sharedTypes(8))
	sigs := process.Signatures()
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil {
			if c == nil {
				t.Fatal("nil component without an error")
			}
			_ = Explain(c, process.Served())
			for _, ty := range c.TypeSpace {
				_ = ty.Describe()
			}
			err := CheckWIT(c, process.Served(), sigs)
			var m *WITMismatch
			var e *Error
			if err != nil && !errors.As(err, &m) && !errors.As(err, &e) {
				t.Fatalf("unclassified CheckWIT error %T: %v", err, err)
			}
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

// sharedTypes is a type section where type i is tuple<i-1, i-1>: n
// bytes per level, 2^n constructors unfolded.
func sharedTypes(n int) []byte {
	items := [][]byte{{0x72, 0x01, 0x01, 'a', 0x73}}
	for i := 1; i < n; i++ {
		items = append(items, cat([]byte{0x6f, 0x02}, sleb(i-1), sleb(i-1)))
	}
	return comp(sec(secType, vec(items...)))
}

// sleb is n as a signed LEB128 (a valtype's type index).
func sleb(n int) []byte { return leb128.AppendSigned(nil, int64(n)) }

// A type DAG of 2^200 constructors unfolded is described within the
// budget (it would never finish unbounded).
func TestDescribeShared(t *testing.T) {
	c, err := Parse(sharedTypes(200))
	if err != nil {
		t.Fatal(err)
	}
	d := c.TypeSpace[199].Describe()
	if !strings.Contains(d, "…") || len(d) > 4096 {
		t.Fatalf("describe = %d bytes: %.200s", len(d), d)
	}
}

// FuzzResolve resolves an imported interface name (the WIT
// "ns:pkg/iface@x.y.z" a component declares) against what the host
// serves. Properties: nothing panics; a served name resolves to itself;
// any other name resolves only to a served module of the same package
// path whose version is semver-compatible, and only when the import's
// version is strict semver (digits, no sign, no leading zero); every
// refusal is a *Error of class ErrUnsupported.
func FuzzResolve(f *testing.F) {
	served := append(process.Served(), "wasi:io/streams@0.2.0", "wasi:cli/stdout@0.2.3")
	for _, s := range append(served, "capsule:process/host@1.1.7", "wasi:io/streams@0.2.9", "wasi:io/streams@0.3.0", "x") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := Resolve(name, 0, served)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("unclassified refusal %T: %v", err, err)
			}
			return
		}
		if !slices.Contains(served, got) {
			t.Fatalf("%q resolved to %q, which is not served", name, got)
		}
		if got == name {
			return
		}
		base, ver, _ := strings.Cut(name, "@")
		gbase, gver, _ := strings.Cut(got, "@")
		if base != gbase || !strictSemver(ver) {
			t.Fatalf("%q resolved to %q", name, got)
		}
		if strings.Split(ver, ".")[0] != strings.Split(gver, ".")[0] {
			t.Fatalf("%q resolved across a major version to %q", name, got)
		}
	})
}

func strictSemver(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 1 && p[0] == '0' || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

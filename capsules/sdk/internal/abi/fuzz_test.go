package abi

import (
	"testing"
	"unicode/utf8"
)

// FuzzScope runs an arbitrary sequence of cabi_realloc calls (fresh
// allocations of any size and alignment, and moves) and then checks the
// scope against a model of what it handed out: every live allocation
// loads whole and holds what was written to it, no range that leaves it
// loads, and a moved allocation's old address loads nothing.
func FuzzScope(f *testing.F) {
	f.Add([]byte{1, 0, 8, 3, 200, 1, 0, 0, 5, 0x81, 2})
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := &Scope{}
		s.Enter()
		defer s.Leave()
		defer s.Free()
		var live []fuzzAlloc
		var dead []uint32
		for i := 0; i+1 < len(ops); i += 2 {
			n := uint32(ops[i]) * uint32(1+ops[i+1]&7) // up to 2 KiB
			align := uint32(1) << (ops[i+1] >> 3 & 7)  // 1 to 128
			if ops[i+1]&0x80 != 0 && len(live) > 0 && n > 0 {
				k := int(ops[i]) % len(live)
				old := live[k]
				p := Realloc(old.p, old.n, align, n)
				dead = append(dead, old.p)
				live[k] = fuzzAlloc{p, n, old.tag}
				m, ok := s.Load(p, n)
				if !ok || !allBytes(m[:min(n, old.n)], old.tag) || !allBytes(m[min(n, old.n):], 0) {
					t.Fatalf("realloc of %#x to %#x: load %v, bytes %v", old.p, p, ok, m)
				}
				for j := range m {
					m[j] = old.tag
				}
				continue
			}
			p := Realloc(0, 0, align, n)
			if p%align != 0 {
				t.Fatalf("allocation %#x not aligned to %d", p, align)
			}
			if n == 0 {
				continue
			}
			tag := byte(len(live) + 1)
			m, ok := s.Load(p, n)
			if !ok {
				t.Fatalf("fresh allocation %#x+%d does not load", p, n)
			}
			for j := range m {
				m[j] = tag
			}
			live = append(live, fuzzAlloc{p, n, tag})
		}
		for _, a := range live {
			m, ok := s.Load(a.p, a.n)
			if !ok || !allBytes(m, a.tag) {
				t.Fatalf("allocation %#x+%d: load %v, bytes %v", a.p, a.n, ok, m)
			}
			if _, ok := s.Load(a.p, a.n+1); ok {
				t.Fatalf("allocation %#x+%d loads one byte more", a.p, a.n)
			}
			if _, ok := s.Load(a.p-1, 1); ok && !liveAt(live, a.p-1) {
				t.Fatalf("the byte before %#x loads", a.p)
			}
		}
		for _, p := range dead {
			if _, ok := s.Load(p, 1); ok && !liveAt(live, p) {
				t.Fatalf("moved allocation %#x still loads", p)
			}
		}
	})
}

func allBytes(m []byte, v byte) bool {
	for _, c := range m {
		if c != v {
			return false
		}
	}
	return true
}

// fuzzAlloc is one allocation FuzzScope made: where, how long, and the
// byte it was filled with.
type fuzzAlloc struct {
	p, n uint32
	tag  byte
}

func liveAt(live []fuzzAlloc, p uint32) bool {
	for _, a := range live {
		if p >= a.p && p-a.p < a.n {
			return true
		}
	}
	return false
}

// FuzzValidUTF8: the ASCII shortcut never changes utf8.Valid's answer.
func FuzzValidUTF8(f *testing.F) {
	f.Add([]byte("hello, world"))
	f.Add([]byte("12345678\xff"))
	f.Add([]byte("naïve"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validUTF8(b), utf8.Valid(b); got != want {
			t.Fatalf("validUTF8(%q) = %v, utf8.Valid %v", b, got, want)
		}
	})
}

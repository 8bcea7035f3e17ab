package abi

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The worked layouts of the reference notes (style-and-canonical-abi.md
// §2.6), derived here from the same rules the bindings use.
func TestLayoutWorkedExamples(t *testing.T) {
	enum := Enum(10)
	tests := []struct {
		name        string
		typ         Type
		size, align uint32
		payload     uint32
		flat        []Core
	}{
		{"string", String, 8, 4, 0, []Core{I32, I32}},
		{"option<u64>", Option(U64), 16, 8, 8, []Core{I32, I64}},
		{"result<list<u8>, enum>", Result(Ptr(List()), &enum), 12, 4, 4, []Core{I32, I32, I32}},
		{"result<_, enum>", Result(nil, &enum), 2, 1, 1, []Core{I32, I32}},
		{"result (no payloads)", Result(nil, nil), 1, 1, 1, []Core{I32}},
		{"variant{a, b(u32), c(string)}", Variant(nil, &U32, &String), 12, 4, 4, []Core{I32, I32, I32}},
		{"record{u64, string}", Record(U64, String), 16, 8, 0, []Core{I64, I32, I32}},
		{"option<s32>", Option(S32), 8, 4, 4, []Core{I32, I32}},
		{"variant{u64, string}", Variant(&U64, &String), 16, 8, 8, []Core{I32, I64, I32}},
		{"enum of 257 cases", Enum(257), 2, 2, 2, []Core{I32}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.typ.Size != tt.size || tt.typ.Align != tt.align || tt.typ.Payload != tt.payload && tt.payload != 0 {
				t.Errorf("size/align/payload = %d/%d/%d, want %d/%d/%d", tt.typ.Size, tt.typ.Align, tt.typ.Payload, tt.size, tt.align, tt.payload)
			}
			if !slices.Equal(tt.typ.Flat, tt.flat) {
				t.Errorf("flat = %v, want %v", tt.typ.Flat, tt.flat)
			}
		})
	}
	r := Record(U64, String)
	if !slices.Equal(r.Offs, []uint32{0, 8}) {
		t.Errorf("record offsets %v", r.Offs)
	}
}

func TestAllocAlignmentAndLoad(t *testing.T) {
	s := &Scope{}
	defer s.Free()
	for _, align := range []uint32{1, 2, 4, 8, 16, 64} {
		p, m := s.Alloc(13, align)
		if p%align != 0 {
			t.Errorf("align %d: address %#x misaligned", align, p)
		}
		if len(m) != 13 {
			t.Errorf("align %d: len %d", align, len(m))
		}
		copy(m, "hello, world!")
		v, ok := s.Load(p+7, 6)
		if !ok || string(v) != "world!" {
			t.Errorf("align %d: Load = %q, %v", align, v, ok)
		}
		if _, ok := s.Load(p+7, 7); ok {
			t.Errorf("align %d: Load past the allocation succeeded", align)
		}
	}
	if p, m := s.Alloc(0, 4); p != 4 || m != nil {
		t.Errorf("zero-size alloc = %#x, %v", p, m)
	}
	if _, ok := s.Load(0xdead, 0); !ok {
		t.Error("a zero-length load must succeed whatever the pointer")
	}
	if _, ok := s.Load(0xdead0000, 1); ok {
		t.Error("a load outside every allocation succeeded")
	}
}

func TestReallocScopes(t *testing.T) {
	s := &Scope{}
	s.Enter()
	p := Realloc(0, 0, 1, 5)
	if m, ok := s.Load(p, 5); !ok {
		t.Fatal("allocation during Enter is not in the scope")
	} else {
		copy(m, "abcde")
	}
	q := Realloc(p, 5, 8, 10)
	if q%8 != 0 {
		t.Errorf("realloc result %#x misaligned", q)
	}
	if m, ok := s.Load(q, 10); !ok || !bytes.Equal(m[:5], []byte("abcde")) || !bytes.Equal(m[5:], make([]byte, 5)) {
		t.Errorf("realloc did not copy: %q %v", m, ok)
	}
	if _, ok := s.Load(p, 1); ok {
		t.Error("the old block survived realloc")
	}
	s.Leave()
	in := Realloc(0, 0, 1, 3)
	if _, ok := Incoming.Load(in, 3); !ok {
		t.Error("allocation outside an import call did not go to Incoming")
	}
	Incoming.Free()
	s.Free()
	if len(s.spans) != 0 || len(s.chunks) != 0 {
		t.Error("Free left allocations")
	}
}

// TestScopeLookup checks Load, find and realloc from one chunk to many
// (spans found by the in-order hint, by binary search within a chunk, in
// and out of allocation order), and across a Free.
func TestScopeLookup(t *testing.T) {
	for _, n := range []int{1, 5, 200, 3000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			s := &Scope{}
			s.Enter()
			defer s.Leave()
			for round := range 2 { // the second round reuses the freed scope
				ptrs := make([]uint32, n)
				for i := range ptrs {
					ptrs[i] = Realloc(0, 0, 1, uint32(8+i%5))
					m, _ := s.Load(ptrs[i], 1)
					m[0] = byte(i)
				}
				// Move every third block: the old address must stop
				// resolving, the new one must hold the copied byte.
				for i := 0; i < n; i += 3 {
					old := ptrs[i]
					ptrs[i] = Realloc(old, 1, 1, 64)
					if _, ok := s.Load(old, 1); ok {
						t.Fatalf("round %d: block %d still loads at its old address", round, i)
					}
				}
				check := func(i int) {
					p := ptrs[i]
					if m, ok := s.Load(p, 1); !ok || m[0] != byte(i) {
						t.Fatalf("round %d: block %d: Load = %v, %v", round, i, m, ok)
					}
					if m, ok := s.Load(p+1, 2); !ok || len(m) != 2 {
						t.Fatalf("round %d: block %d: interior Load = %v, %v", round, i, m, ok)
					}
					if _, ok := s.Load(p, 65); ok {
						t.Fatalf("round %d: block %d: a Load past its end succeeded", round, i)
					}
				}
				for i := range ptrs { // in allocation order: the hint
					check(i)
				}
				for i := n - 1; i >= 0; i -= 7 { // backwards: binary search
					check(i)
				}
				if n >= 1000 && len(s.chunks) < 2 {
					t.Fatalf("%d allocations fit one chunk: the test does not cross chunks", n)
				}
				s.Free()
				if _, ok := s.Load(ptrs[0], 1); ok {
					t.Fatalf("round %d: Load after Free succeeded", round)
				}
			}
		})
	}
}

// TestLoadSpansOneAllocation: a range over two neighbouring allocations
// (adjacent in the same chunk) is refused, as is the gap alignment left.
func TestLoadSpansOneAllocation(t *testing.T) {
	s := &Scope{}
	defer s.Free()
	a, _ := s.Alloc(3, 1)
	b, _ := s.Alloc(8, 8)
	if b <= a+3 || b-a > 16 {
		t.Fatalf("allocations %#x, %#x are not neighbours in one chunk", a, b)
	}
	if _, ok := s.Load(a, 3); !ok {
		t.Error("first allocation not loadable")
	}
	if _, ok := s.Load(a, b-a+1); ok {
		t.Error("a range across two allocations loaded")
	}
	if _, ok := s.Load(a+3, 1); ok {
		t.Error("the alignment gap between two allocations loaded")
	}
}

// TestLiftedStringOutlivesScope: a lifted string is a view of the
// scope's memory, which stays valid (and unchanged) after Free and the
// allocations that follow it.
func TestLiftedStringOutlivesScope(t *testing.T) {
	s := &Scope{}
	p, m := s.Alloc(5, 1)
	copy(m, "hello")
	var pair [8]byte
	PutU32(pair[:], 0, p)
	PutU32(pair[:], 4, 5)
	l := Lifter{M: s}
	got := l.String(pair[:], 0, "s")
	s.Free()
	for range 100 {
		_, m := s.Alloc(64, 1)
		for i := range m {
			m[i] = 'x'
		}
	}
	if l.Err != nil || got != "hello" {
		t.Fatalf("lifted %q (%v), want hello", got, l.Err)
	}
}

func TestReallocRejectsHostBugs(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"bad alignment", func() { Realloc(0, 0, 3, 8) }, "power of two"},
		{"unknown old ptr", func() { Realloc(0x1234, 8, 1, 16) }, "not allocated by cabi_realloc"},
		{"null with size", func() { Realloc(0, 4, 1, 8) }, "old_ptr 0"},
		{"huge", func() { Realloc(0, 0, 1, 1<<29) }, "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(r.(string), tt.want) {
					t.Errorf("panic = %v, want it to mention %q", r, tt.want)
				}
				Incoming.Free()
			}()
			tt.f()
		})
	}
}

func TestLifterValidates(t *testing.T) {
	s := &Scope{}
	defer s.Free()
	good, gm := s.Alloc(4, 1)
	copy(gm, "\xff\xfeok")
	var pair [8]byte
	check := func(ptr, n uint32, want string) {
		t.Helper()
		PutU32(pair[:], 0, ptr)
		PutU32(pair[:], 4, n)
		l := Lifter{M: s}
		l.String(pair[:], 0, "f")
		if l.Err == nil || !strings.Contains(l.Err.Error(), want) {
			t.Errorf("String(%#x, %d) err = %v, want %q", ptr, n, l.Err, want)
		}
	}
	check(good, 4, "invalid UTF-8")
	check(good, 5, "not memory the host allocated")
	check(0x7fff_0000, 1, "not memory the host allocated")
	check(good, 1<<28, "2^28-1")

	// A list of 8-byte elements at an odd address is misaligned.
	l := Lifter{M: s}
	PutU32(pair[:], 0, good+1)
	PutU32(pair[:], 4, 1)
	l.List(pair[:], 0, U64, "list<u64>")
	if l.Err == nil || !strings.Contains(l.Err.Error(), "aligned") {
		t.Errorf("misaligned list err = %v", l.Err)
	}
	// Discriminant out of range.
	l = Lifter{M: s}
	if l.Case([]byte{3}, 0, 2, "option"); l.Err == nil {
		t.Error("discriminant 3 of 2 cases accepted")
	}
}

func TestLowerStrings(t *testing.T) {
	s := &Scope{}
	defer s.Free()
	p, n := s.Strs([]string{"a", "", "héllo"})
	if n != 3 {
		t.Fatalf("len %d", n)
	}
	arr, ok := s.Load(p, 24)
	if !ok {
		t.Fatal("list not loadable")
	}
	l := Lifter{M: s}
	var got []string
	for i := uint32(0); i < 3; i++ {
		got = append(got, l.String(arr, i*8, "e"))
	}
	if l.Err != nil || !slices.Equal(got, []string{"a", "", "héllo"}) {
		t.Errorf("round trip = %q, %v", got, l.Err)
	}
}

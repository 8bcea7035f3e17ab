package abi

// Lowering a call's arguments: every string and list is copied into a
// scope allocation (never a pointer into a Go string, which the GC could
// free mid-call if the compiler decided the string was dead).

// Str copies s into the scope and returns (ptr, len).
func (s *Scope) Str(v string) (uint32, uint32) {
	p, m := s.Alloc(uint32(len(v)), 1)
	copy(m, v)
	return p, uint32(len(v))
}

// OptStr lowers an option<string>: (0, 0, 0) for nil, else (1, ptr, len).
func (s *Scope) OptStr(v *string) (d, p, n uint32) {
	if v == nil {
		return 0, 0, 0
	}
	p, n = s.Str(*v)
	return 1, p, n
}

// Bytes copies v into the scope and returns (ptr, len).
func (s *Scope) Bytes(v []byte) (uint32, uint32) {
	p, m := s.Alloc(uint32(len(v)), 1)
	copy(m, v)
	return p, uint32(len(v))
}

// Strs lowers a list<string> and returns (ptr, len).
func (s *Scope) Strs(v []string) (uint32, uint32) {
	p, m := s.Alloc(uint32(len(v))*String.Size, String.Align)
	for i, e := range v {
		sp, sl := s.Str(e)
		PutU32(m, uint32(i)*8, sp)
		PutU32(m, uint32(i)*8+4, sl)
	}
	return p, uint32(len(v))
}

// PutStr lowers v into memory at b[off:] as (ptr, len).
func (s *Scope) PutStr(b []byte, off uint32, v string) {
	p, n := s.Str(v)
	PutU32(b, off, p)
	PutU32(b, off+4, n)
}

// PutBytes lowers v into memory at b[off:] as (ptr, len).
func (s *Scope) PutBytes(b []byte, off uint32, v []byte) {
	p, n := s.Bytes(v)
	PutU32(b, off, p)
	PutU32(b, off+4, n)
}

// Ret allocates a return area for a result of type t.
func (s *Scope) Ret(t Type) (uint32, []byte) { return s.Alloc(t.Size, t.Align) }

// Poke writes v at guest address addr of any live allocation of s. It is
// how tests play the host; bindings never need it.
func (s *Scope) Poke(addr uint32, v []byte) bool {
	m, ok := s.Load(addr, uint32(len(v)))
	if ok {
		copy(m, v)
	}
	return ok
}

// Package cabitest is an in-Go stand-in for a guest: a linear memory backed
// by a []byte and a bump-allocating cabi_realloc, so Canonical ABI code can
// be tested without an engine.
package cabitest

import (
	"context"
	"errors"

	"github.com/capsule-host/capsule-host/host/engine"
)

// Memory is a guest linear memory over a byte slice.
type Memory struct{ B []byte }

// Read copies n bytes at off.
func (m *Memory) Read(off, n uint32) ([]byte, bool) {
	if uint64(off)+uint64(n) > uint64(len(m.B)) {
		return nil, false
	}
	return append([]byte(nil), m.B[off:off+n]...), true
}

// Write copies b to off.
func (m *Memory) Write(off uint32, b []byte) bool {
	if uint64(off)+uint64(len(b)) > uint64(len(m.B)) {
		return false
	}
	copy(m.B[off:], b)
	return true
}

// Size is len(B).
func (m *Memory) Size() uint32 { return uint32(len(m.B)) }

// Caller is a fake engine.Caller: Realloc bump-allocates from Next upwards
// (aligned), failing when memory is exhausted. Hook, when set, replaces
// the allocator (to model a hostile cabi_realloc).
type Caller struct {
	Mem   *Memory
	Next  uint32
	Calls int
	Hook  func(align, size uint32) (uint32, error)
}

// New returns a Caller with size bytes of memory whose allocator starts at
// heap (the bytes below are the test's own scratch space).
func New(size, heap uint32) *Caller {
	return &Caller{Mem: &Memory{B: make([]byte, size)}, Next: heap}
}

// Memory returns the guest memory.
func (c *Caller) Memory() engine.Memory { return c.Mem }

var _ engine.Caller = (*Caller)(nil)

// ErrOutOfMemory is returned by the bump allocator when memory is full.
var ErrOutOfMemory = errors.New("cabitest: out of memory")

// Realloc allocates newSize bytes aligned to align (only fresh allocations:
// oldPtr must be 0, as the host only ever allocates).
func (c *Caller) Realloc(ctx context.Context, oldPtr, oldSize, align, newSize uint32) (uint32, error) {
	c.Calls++
	if c.Hook != nil {
		return c.Hook(align, newSize)
	}
	if align == 0 {
		align = 1
	}
	p := (c.Next + align - 1) / align * align
	if uint64(p)+uint64(newSize) > uint64(len(c.Mem.B)) {
		return 0, ErrOutOfMemory
	}
	c.Next = p + newSize
	return p, nil
}

package abi

import (
	"fmt"
	"unsafe"
)

// Memory strategy (see RFC.md §11, "Why this cabi_realloc?").
//
// Every guest buffer the host sees (argument data, return areas, and
// whatever the host allocates through cabi_realloc) is a Go heap []uint64,
// so it is 8-aligned, and it is referenced from a Scope until the guest has
// copied the data out. Go's heap does not move objects, so a reference is
// all the pinning a heap object needs; nothing is ever on a goroutine stack,
// which can move when it grows (even during a re-entrant cabi_realloc).
//
// A Scope covers one import call (or one export call's arguments or
// results). Freeing it drops every reference at once, so the host's
// allocations cannot leak past the call that made them.

// block is one allocation: its guest address and a byte view of it.
type block struct {
	addr uint32
	mem  []byte
	buf  []uint64 // keeps the allocation alive
}

// Scope owns the guest memory of one call. The first blocks live inline:
// a typical import needs 2-4 (arguments, return area, host results).
// Past indexFrom blocks an index by start address keeps Load and find
// O(1): a list of 500 process-infos is some 1,500 strings, and a linear
// search per lifted string made the lift quadratic (BenchmarkShellList).
type Scope struct {
	blocks []block
	inline [4]block
	index  map[uint32]int // block start → index in blocks; nil below indexFrom
}

// indexFrom is the block count from which a Scope keeps its index.
const indexFrom = 16

// cur receives cabi_realloc allocations during an import call; outside
// one they go to Incoming (the host writing an export's arguments).
var (
	cur      *Scope
	Incoming = &Scope{}
)

// maxAlloc bounds one allocation (the Canonical ABI's 2^28-1 byte limit
// on strings and lists, rounded up).
const maxAlloc = 1 << 28

// Alloc returns n zeroed bytes aligned to align (a power of two up to 8
// is ever needed; larger alignments are honoured by over-allocating) and
// their guest address. n == 0 gives a non-null aligned address and no
// memory, which the Canonical ABI allows for empty strings and lists.
func (s *Scope) Alloc(n, align uint32) (uint32, []byte) {
	if align == 0 || align&(align-1) != 0 {
		panic(fmt.Sprintf("abi: alignment %d is not a power of two", align))
	}
	if n == 0 {
		return align, nil
	}
	if n > maxAlloc {
		panic(fmt.Sprintf("abi: allocation of %d bytes exceeds %d", n, maxAlloc))
	}
	extra := uint32(0)
	if align > 8 {
		extra = align
	}
	buf := make([]uint64, (n+extra+7)/8)
	base := addrOf(&buf[0], uint32(len(buf)*8))
	addr := AlignTo(base, align)
	all := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	mem := all[addr-base : addr-base+n : addr-base+n]
	if s.blocks == nil {
		s.blocks = s.inline[:0]
	}
	s.blocks = append(s.blocks, block{addr: addr, mem: mem, buf: buf})
	switch {
	case s.index != nil:
		s.index[addr] = len(s.blocks) - 1
	case len(s.blocks) >= indexFrom:
		s.index = make(map[uint32]int, 2*len(s.blocks))
		for i, b := range s.blocks {
			if b.mem != nil {
				s.index[b.addr] = i
			}
		}
	}
	return addr, mem
}

// Load returns a view of n bytes at ptr. It fails unless the range lies
// inside one allocation of this scope: the host may only hand back memory
// it obtained from cabi_realloc during this call. n == 0 always succeeds.
func (s *Scope) Load(ptr, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if i, ok := s.index[ptr]; ok && n <= uint32(len(s.blocks[i].mem)) {
		return s.blocks[i].mem[:n:n], true
	}
	// A range inside a block (an element of a list, say), or no index.
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := &s.blocks[i]
		if ptr >= b.addr && uint64(ptr)+uint64(n) <= uint64(b.addr)+uint64(len(b.mem)) {
			off := ptr - b.addr
			return b.mem[off : off+n : off+n], true
		}
	}
	return nil, false
}

// find returns the index of the block starting at ptr, or -1.
func (s *Scope) find(ptr uint32) int {
	if s.index != nil {
		if i, ok := s.index[ptr]; ok {
			return i
		}
		return -1
	}
	for i := len(s.blocks) - 1; i >= 0; i-- {
		if s.blocks[i].addr == ptr {
			return i
		}
	}
	return -1
}

// Free drops every allocation of the scope.
func (s *Scope) Free() {
	clear(s.blocks)
	s.blocks = s.blocks[:0]
	clear(s.index) // kept, with its buckets, for the next large call
}

// Enter makes s receive the host's cabi_realloc calls until Leave: call it
// right before an import that returns strings or lists.
func (s *Scope) Enter() { cur = s }

// Leave ends the import call Enter began.
func (s *Scope) Leave() { cur = nil }

// Realloc is cabi_realloc: (old_ptr, old_size, align, new_size) -> ptr.
// It is the body of the wasm export; a bad argument panics, which traps
// the call, because the host broke the ABI.
func Realloc(oldPtr, oldSize, align, newSize uint32) uint32 {
	s := cur
	if s == nil {
		s = Incoming
	}
	if oldPtr == 0 {
		if oldSize != 0 {
			panic("cabi_realloc: old_ptr 0 with nonzero old_size")
		}
		p, _ := s.Alloc(newSize, align)
		return p
	}
	i := s.find(oldPtr)
	if i < 0 {
		if oldSize == 0 {
			// A zero-size "allocation" was never stored.
			p, _ := s.Alloc(newSize, align)
			return p
		}
		panic(fmt.Sprintf("cabi_realloc: old_ptr %#x was not allocated by cabi_realloc", oldPtr))
	}
	old := s.blocks[i]
	if oldSize > uint32(len(old.mem)) {
		panic(fmt.Sprintf("cabi_realloc: old_size %d exceeds the allocation's %d bytes", oldSize, len(old.mem)))
	}
	p, mem := s.Alloc(newSize, align)
	copy(mem, old.mem[:oldSize])
	// Drop the old block in place (Alloc may have appended, so index i is
	// intact): an empty block matches no Load, and the index stays true.
	s.blocks[i] = block{}
	delete(s.index, oldPtr)
	return p
}

// Current is the scope of the import call in flight (nil outside one).
// Tests that play the host use it to write results.
func Current() *Scope { return cur }

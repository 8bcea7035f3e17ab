package abi

import (
	"fmt"
	"unsafe"
)

// Memory strategy (see RFC.md §11, "Why this cabi_realloc?", and §18 for
// the measurements behind the chunks).
//
// Every guest buffer the host sees (argument data, return areas, and
// whatever the host allocates through cabi_realloc) lies in a chunk: a Go
// heap []uint64, so 8-aligned, never moved by Go's GC, and pointer-free.
// An allocation bumps an offset in the scope's newest chunk; a request the
// chunk cannot hold starts a new one (twice the last, up to maxChunk, or as
// large as the request), so one chunk's allocations are consecutive in
// Scope.spans and ascending in address. Memory is never handed out twice:
// a chunk lives while its scope or a string lifted from it (Lifter.String
// returns views, not copies) refers to it, and nothing writes to it once
// its call is over.
//
// Why chunks rather than one Go allocation per request: cabi_realloc runs
// once per string the host lowers (some 1,500 for a list of 500
// process-infos), and in the guest every Go basic block costs a
// termination check under the host's engine, so a mallocgc and an index
// map insertion per call made the guest's allocator the largest part of a
// list (BenchmarkShellList).
//
// A Scope covers one import call (or one export call's arguments or
// results). Freeing it drops every reference at once, so the host's
// allocations cannot leak past the call that made them.

// span is one allocation; n == 0 marks one that realloc moved away.
type span struct{ addr, n uint32 }

// chunk is a run of guest memory the scope allocates from.
type chunk struct {
	base, next, end uint32 // [base, end) its guest addresses, next the first free one
	first           int    // index in Scope.spans of its first allocation
	mem             []byte // its bytes; mem[0] is at base
}

// Scope owns the guest memory of one call. Its first chunk and spans
// live inline: a typical import needs two to four small allocations
// (arguments, return area, host results).
type Scope struct {
	chunks []chunk
	spans  []span
	hint   int // the span the last lookup found (lifts read in allocation order)
	hintC  int // and its chunk

	inlineChunks [2]chunk
	inlineSpans  [6]span
}

// Chunk sizes: the first chunk holds a typical import call; each next one
// doubles, so a large list takes a dozen chunks, not one per string.
const (
	minChunk = 512
	maxChunk = 64 << 10
)

// cur receives cabi_realloc allocations during an import call; outside
// one they go to Incoming (the host writing an export's arguments).
var (
	cur      *Scope
	Incoming = &Scope{}
)

// maxAlloc bounds one allocation (the Canonical ABI's 2^28-1 byte limit
// on strings and lists, rounded up).
const maxAlloc = 1 << 28

// Alloc returns n zeroed bytes aligned to align (any power of two) and
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
	var c *chunk
	if k := len(s.chunks); k > 0 {
		c = &s.chunks[k-1]
	}
	if c == nil || uint64(AlignTo(c.next, align))+uint64(n) > uint64(c.end) {
		c = s.grow(n, align)
	}
	addr := AlignTo(c.next, align)
	c.next = addr + n
	if s.spans == nil {
		s.spans = s.inlineSpans[:0]
	}
	s.spans = append(s.spans, span{addr, n})
	off := addr - c.base
	return addr, c.mem[off : off+n : off+n]
}

// grow starts a chunk that holds n bytes aligned to align.
func (s *Scope) grow(n, align uint32) *chunk {
	size := uint32(minChunk)
	if k := len(s.chunks); k > 0 {
		size = min(2*(s.chunks[k-1].end-s.chunks[k-1].base), maxChunk)
	}
	need := n
	if align > 8 { // the chunk base is only 8-aligned
		need += align
	}
	size = max(size, AlignTo(need, 8))
	buf := make([]uint64, size/8)
	base := addrOf(&buf[0], size)
	if s.chunks == nil {
		s.chunks = s.inlineChunks[:0]
	}
	s.chunks = append(s.chunks, chunk{
		base: base, next: base, end: base + size, first: len(s.spans),
		mem: unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), size),
	})
	return &s.chunks[len(s.chunks)-1]
}

// locate returns the indexes of the chunk and the span holding ptr, or
// -1, -1. It tries the span after the last one found first, then the
// chunk's spans by binary search (they ascend in address).
func (s *Scope) locate(ptr uint32) (int, int) {
	if h := s.hint + 1; h < len(s.spans) && s.spans[h].addr <= ptr && ptr-s.spans[h].addr < s.spans[h].n {
		// Every chunk holds at least one span, so span h is in the hint's
		// chunk or the next.
		if c := s.hintC + 1; c < len(s.chunks) && s.chunks[c].first <= h {
			s.hintC = c
		}
		s.hint = h
		return s.hintC, h
	}
	for ci := range s.chunks {
		c := &s.chunks[ci]
		if ptr < c.base || ptr >= c.next {
			continue
		}
		lo, hi := c.first, len(s.spans) // the last span ≤ ptr is in [lo, hi)
		if ci+1 < len(s.chunks) {
			hi = s.chunks[ci+1].first
		}
		for hi-lo > 1 {
			mid := int(uint(lo+hi) >> 1)
			if s.spans[mid].addr <= ptr {
				lo = mid
			} else {
				hi = mid
			}
		}
		if sp := s.spans[lo]; sp.addr <= ptr && ptr-sp.addr < sp.n {
			s.hint, s.hintC = lo, ci
			return ci, lo
		}
		return -1, -1
	}
	return -1, -1
}

// Load returns a view of n bytes at ptr. It fails unless the range lies
// inside one allocation of this scope: the host may only hand back memory
// it obtained from cabi_realloc during this call. n == 0 always succeeds.
func (s *Scope) Load(ptr, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	ci, si := s.locate(ptr)
	if si < 0 {
		return nil, false
	}
	sp := s.spans[si]
	if uint64(ptr)+uint64(n) > uint64(sp.addr)+uint64(sp.n) {
		return nil, false
	}
	off := ptr - s.chunks[ci].base
	return s.chunks[ci].mem[off : off+n : off+n], true
}

// find returns the chunk and span index of the allocation starting at
// ptr, or -1, -1.
func (s *Scope) find(ptr uint32) (int, int) {
	ci, si := s.locate(ptr)
	if si < 0 || s.spans[si].addr != ptr {
		return -1, -1
	}
	return ci, si
}

// Free drops every allocation of the scope.
func (s *Scope) Free() {
	clear(s.chunks) // drop the memory references
	s.chunks = s.chunks[:0]
	s.spans = s.spans[:0]
	s.hint, s.hintC = 0, 0
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
	ci, si := s.find(oldPtr)
	if si < 0 {
		if oldSize == 0 {
			// A zero-size "allocation" was never stored.
			p, _ := s.Alloc(newSize, align)
			return p
		}
		panic(fmt.Sprintf("cabi_realloc: old_ptr %#x was not allocated by cabi_realloc", oldPtr))
	}
	old := s.spans[si]
	if oldSize > old.n {
		panic(fmt.Sprintf("cabi_realloc: old_size %d exceeds the allocation's %d bytes", oldSize, old.n))
	}
	off := old.addr - s.chunks[ci].base
	from := s.chunks[ci].mem[off : off+oldSize]
	p, mem := s.Alloc(newSize, align)
	copy(mem, from)
	// Retire the old span in place (Alloc may have appended, so index si
	// is intact): an empty span matches no lookup.
	s.spans[si].n = 0
	return p
}

// Current is the scope of the import call in flight (nil outside one).
// Tests that play the host use it to write results.
func Current() *Scope { return cur }

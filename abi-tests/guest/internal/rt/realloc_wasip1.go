//go:build wasip1

package rt

import "unsafe"

// keep holds every block cabi_realloc handed out since the last Reset.
//
// Why: the host writes pointers to these blocks into result areas that the
// generated bindings declare as byte arrays ("shapes" of variants and
// results), which the Go GC does not scan. Without keep, a collection run
// by a later cabi_realloc in the same host call could free a block the
// host already filled. Blocks live until the next tool call starts.
var keep [][]uint64

// empty is the (aligned, never written) block of every 0-byte allocation.
var empty uint64

// Reset releases the blocks of the previous tool call.
func Reset() {
	clear(keep)
	keep = keep[:0]
}

// cabiRealloc is the Canonical ABI allocator. Blocks are 8-byte aligned,
// enough for every type in the capsule contract (align <= 8).
//
//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	if newSize == 0 {
		return unsafe.Pointer(&empty)
	}
	if align > 8 {
		panic("cabi_realloc: alignment above 8")
	}
	blk := make([]uint64, (newSize+7)/8)
	keep = append(keep, blk)
	p := unsafe.Pointer(unsafe.SliceData(blk))
	if old != nil && oldSize > 0 {
		copy(unsafe.Slice((*byte)(p), newSize), unsafe.Slice((*byte)(old), min(oldSize, newSize)))
	}
	return p
}

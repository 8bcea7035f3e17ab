//go:build wasip1

package abi

import "unsafe"

// addrOf is the linear-memory address of a heap word.
func addrOf(p *uint64, _ uint32) uint32 { return uint32(uintptr(unsafe.Pointer(p))) }

// cabiRealloc is the Canonical ABI allocator the host calls to place
// strings and lists in guest memory (import results, export arguments).
//
//go:wasmexport cabi_realloc
func cabiRealloc(oldPtr, oldSize, align, newSize uint32) uint32 {
	return Realloc(oldPtr, oldSize, align, newSize)
}

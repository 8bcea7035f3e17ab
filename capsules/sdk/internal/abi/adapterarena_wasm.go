//go:build wasip1

package abi

// The wasi_snapshot_preview1 adapter that turns a capsule into a
// component allocates its state and stack through the main module's
// allocator on its first WASI call, which Go's runtime makes inside
// _initialize, before any go:wasmexport (cabi_realloc) may run.
// internal/goadapt appends a small non-Go bump allocator,
// cabi_realloc_adapter, that wit-component hands the adapter instead;
// it allocates from adapterArena. The arena is zeroed data (.noptrbss:
// no bytes in the binary, never scanned by the GC, never touched by Go),
// so Go's heap, which grows from the end of the module's data, can never
// overlap it. The tool finds it through adapterArenaDesc: the magic in a
// data segment, followed by the arena's address and size (8 bytes each,
// little-endian: GOARCH=wasm pointers are 64-bit).

// AdapterArenaSize is what the adapter gets: its state and a 64 KiB
// stack fit with room to spare (RFC.md §17 has the measured use).
const AdapterArenaSize = 256 << 10

var adapterArena [AdapterArenaSize]byte

// adapterArenaDesc's magic is "capsule:arena:v1", spelled as bytes so
// that the compiler initializes the descriptor statically (in a data
// segment), not in init code.

var adapterArenaDesc = struct {
	magic [16]byte
	base  *[AdapterArenaSize]byte
	size  uint64
}{magic: [16]byte{'c', 'a', 'p', 's', 'u', 'l', 'e', ':', 'a', 'r', 'e', 'n', 'a', ':', 'v', '1'}, base: &adapterArena, size: AdapterArenaSize}

// init reads the descriptor, so that the linker keeps it (and through
// its pointer the arena) in every SDK capsule.
func init() {
	if adapterArenaDesc.size != AdapterArenaSize || adapterArenaDesc.base == nil {
		panic("abi: adapter arena descriptor damaged")
	}
}

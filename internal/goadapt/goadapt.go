// Package goadapt makes a Go (gc) wasip1 capsule wrappable as a
// WebAssembly component with the wasi_snapshot_preview1 adapter.
//
// The adapter allocates its state and stack through the main module's
// cabi_realloc on its first WASI call, which Go's runtime makes inside
// _initialize, before any go:wasmexport may run: Go throws and the
// instance dies. wit-component (inside jco's componentNew) hands the
// adapter the main module's cabi_realloc_adapter export instead when
// there is one. Inject appends exactly that: one bump-allocator function
// written in wasm (no Go code runs), one mutable i32 global (its next
// free address), the func type if missing, and the export. It allocates
// from the arena capsules/sdk reserves (capsules/sdk/internal/abi,
// adapterarena_wasm.go), found through a magic descriptor in the data.
//
// Why an arena the SDK reserves and not pages from memory.grow: Go's
// runtime owns all linear memory above its data (runtime.sbrk assumes
// the pages past its own break are its own and grows by the difference),
// so pages the adapter grew would end up inside Go's heap.
//
// Appending after the existing functions and globals shifts no index;
// the function, code, global and export sections' counts and the name
// section are rewritten, every other byte is copied, so the output is a
// pure function of the input.
package goadapt

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// ExportName is the export wit-component gives the adapter as its
// __main_module__.cabi_realloc.
const ExportName = "cabi_realloc_adapter"

// ArenaMagic marks the SDK's arena descriptor in a data segment: the
// magic, then the arena's address and size as 8-byte little-endian words.
const ArenaMagic = "capsule:arena:v1"

// Arena is where the injected allocator allocates: [Base, Base+Size).
type Arena struct{ Base, Size uint64 }

// Inject returns core with cabi_realloc_adapter added, and the arena it
// allocates from. Bad input gets an *Error wrapping ErrMalformed,
// ErrUnsupported, ErrNoArena or ErrAdapted.
func Inject(core []byte) ([]byte, Arena, error) {
	m, perr := parse(core)
	if perr != nil {
		return nil, Arena{}, perr
	}
	a, aerr := m.arena()
	if aerr != nil {
		return nil, Arena{}, aerr
	}
	out, err := m.emit(a)
	if err != nil {
		return nil, Arena{}, err
	}
	return out, a, nil
}

// arena finds the SDK's descriptor: exactly one copy of the magic in the
// active data, an arena inside the initial memory that no data segment
// initializes (it must be zeroed data, which Go never hands out).
func (m *module) arena() (Arena, *Error) {
	fail := func(format string, args ...any) (Arena, *Error) {
		return Arena{}, &Error{Section: "data", Offset: m.secs[m.sectionIndex[secData]].start, Reason: fmt.Sprintf(format, args...), kind: ErrNoArena}
	}
	var at uint64
	found := 0
	for _, s := range m.segments {
		for i := 0; ; {
			j := bytes.Index(s.data[i:], []byte(ArenaMagic))
			if j < 0 {
				break
			}
			at, found, i = s.addr+uint64(i+j), found+1, i+j+1
		}
	}
	switch {
	case found == 0:
		return fail("no %q descriptor in the data: build the capsule with capsules/sdk", ArenaMagic)
	case found > 1:
		return fail("%d copies of the %q descriptor in the data", found, ArenaMagic)
	}
	d := m.memory(at+uint64(len(ArenaMagic)), 16)
	a := Arena{Base: binary.LittleEndian.Uint64(d), Size: binary.LittleEndian.Uint64(d[8:])}
	mem := m.memMin * 65536
	if a.Base == 0 || a.Base%8 != 0 || a.Size == 0 || a.Base > mem || a.Size > mem-a.Base || a.Base+a.Size > 1<<31 {
		return fail("the descriptor at %#x names arena [%#x, +%#x), not an 8-aligned range inside the %#x bytes of initial memory", at, a.Base, a.Size, mem)
	}
	for _, s := range m.segments {
		if s.addr < a.Base+a.Size && a.Base < s.addr+uint64(len(s.data)) {
			return fail("the arena [%#x, +%#x) overlaps the data segment at %#x: it must be zeroed data", a.Base, a.Size, s.addr)
		}
	}
	return a, nil
}

// memory reads n bytes of the initial memory image at addr (zero where
// no active segment writes).
func (m *module) memory(addr uint64, n int) []byte {
	out := make([]byte, n)
	for _, s := range m.segments {
		for i := range out {
			if a := addr + uint64(i); a >= s.addr && a-s.addr < uint64(len(s.data)) {
				out[i] = s.data[a-s.addr]
			}
		}
	}
	return out
}

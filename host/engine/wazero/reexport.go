package wazero

import (
	"fmt"

	"github.com/tetratelabs/wazero/api"

	"github.com/capsule-host/capsule-host/host/engine"
)

// reexportItem is one import-and-export of a generated re-export module.
type reexportItem struct {
	module, field, export string
	kind                  engine.ExternKind
	params, results       []api.ValueType // func
	valType               api.ValueType   // global
	mutable               bool            // global
}

// reexportModule encodes a core module that imports each item and
// exports it again. Tables are declared funcref with no limits and
// memories with none, which any table or memory of that kind satisfies:
// the item is the source's own, so its real limits still apply.
func reexportModule(items []reexportItem) ([]byte, error) {
	var types, imports, exports []byte
	var nTypes, nMem int
	var count [4]uint32
	for _, it := range items {
		imports = append(imports, wasmName(it.module)...)
		imports = append(imports, wasmName(it.field)...)
		imports = append(imports, byte(it.kind))
		switch it.kind {
		case engine.ExternFunc:
			types = append(types, 0x60)
			types = append(types, leb(uint32(len(it.params)))...)
			types = append(types, it.params...)
			types = append(types, leb(uint32(len(it.results)))...)
			types = append(types, it.results...)
			imports = append(imports, leb(uint32(nTypes))...)
			nTypes++
		case engine.ExternTable:
			imports = append(imports, 0x70, 0x00, 0x00)
		case engine.ExternMemory:
			if nMem++; nMem > 1 {
				return nil, fmt.Errorf("%w: two memories in one import module (multi-memory is not supported)", engine.ErrLink)
			}
			imports = append(imports, 0x00, 0x00)
		case engine.ExternGlobal:
			mut := byte(0)
			if it.mutable {
				mut = 1
			}
			imports = append(imports, it.valType, mut)
		}
		exports = append(exports, wasmName(it.export)...)
		exports = append(exports, byte(it.kind))
		exports = append(exports, leb(count[it.kind])...)
		count[it.kind]++
	}
	out := []byte("\x00asm\x01\x00\x00\x00")
	out = section(out, 1, uint32(nTypes), types)
	out = section(out, 2, uint32(len(items)), imports)
	out = section(out, 7, uint32(len(items)), exports)
	return out, nil
}

func section(out []byte, id byte, n uint32, body []byte) []byte {
	if n == 0 {
		return out
	}
	content := append(leb(n), body...)
	out = append(out, id)
	out = append(out, leb(uint32(len(content)))...)
	return append(out, content...)
}

func wasmName(s string) []byte { return append(leb(uint32(len(s))), s...) }

func leb(v uint32) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, c|0x80)
			continue
		}
		return append(out, c)
	}
}

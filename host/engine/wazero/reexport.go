package wazero

import (
	"fmt"

	"github.com/tetratelabs/wazero/api"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/internal/leb128"
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
			types = append(leb128.AppendUnsigned(types, uint64(len(it.params))), it.params...)
			types = append(leb128.AppendUnsigned(types, uint64(len(it.results))), it.results...)
			imports = leb128.AppendUnsigned(imports, uint64(nTypes))
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
		exports = leb128.AppendUnsigned(exports, uint64(count[it.kind]))
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
	content := append(leb128.AppendUnsigned(nil, uint64(n)), body...)
	out = leb128.AppendUnsigned(append(out, id), uint64(len(content)))
	return append(out, content...)
}

func wasmName(s string) []byte { return append(leb128.AppendUnsigned(nil, uint64(len(s))), s...) }

// Package component reads WebAssembly component binaries (the component
// model's binary format, layer 1) far enough to tell a component from a
// core module, check its structure and index spaces, and say precisely
// what this host cannot run yet.
//
// The host compiles core modules only. A component is parsed and
// validated here, then refused with a typed *Error (ErrUnsupported)
// naming the construct, where it is and what to do; never with an
// engine's "invalid version header".
package component

import (
	"bytes"
	"fmt"
)

// Kind tells what a wasm binary is from its 8-byte preamble.
type Kind int

const (
	KindUnknown    Kind = iota
	KindCoreModule      // version 1, layer 0
	KindComponent       // version 0x0d, layer 1
)

func (k Kind) String() string {
	switch k {
	case KindCoreModule:
		return "core module"
	case KindComponent:
		return "component"
	}
	return "not wasm"
}

var magic = []byte("\x00asm")

// Detect reads the preamble: magic, then a 16-bit version and a 16-bit
// layer (a core module's 32-bit version 1 is version 1, layer 0).
func Detect(b []byte) (Kind, error) {
	if len(b) < 8 || !bytes.Equal(b[:4], magic) {
		return KindUnknown, malformed("", 0, "no wasm magic number (\\0asm)")
	}
	version := uint16(b[4]) | uint16(b[5])<<8
	layer := uint16(b[6]) | uint16(b[7])<<8
	switch {
	case layer == 0 && version == 1:
		return KindCoreModule, nil
	case layer == 1 && version == 0x0d:
		return KindComponent, nil
	case layer == 1:
		return KindUnknown, &Error{Offset: 4, Construct: fmt.Sprintf("component binary version %#x", version),
			Reason: "this host reads version 0xd (the component-model MVP)", Hint: "rebuild with a toolchain that emits component version 0xd", kind: ErrUnsupported}
	}
	return KindUnknown, malformed("", 4, "unknown wasm version %#x layer %d", version, layer)
}

// Sort is a component-level sort (index space).
type Sort byte

const (
	SortCoreFunc Sort = iota
	SortCoreTable
	SortCoreMemory
	SortCoreGlobal
	SortCoreType
	SortCoreModule
	SortCoreInstance
	SortFunc
	SortValue
	SortType
	SortComponent
	SortInstance
	numSorts
)

var sortNames = [numSorts]string{"core func", "core table", "core memory", "core global", "core type",
	"core module", "core instance", "func", "value", "type", "component", "instance"}

func (s Sort) String() string {
	if s < numSorts {
		return sortNames[s]
	}
	return fmt.Sprintf("sort(%d)", byte(s))
}

// Component is a decoded component. Indices are into its own index spaces.
type Component struct {
	CoreModules   []CoreModule
	CoreInstances []CoreInstance
	Components    []*Component
	Instances     []Instance
	Aliases       []Alias
	Canons        []Canon
	Imports       []Extern
	Exports       []Export
	// Types counts the component-level type definitions (type section).
	Types int
	// TypeSpace is the type of each entry of the type index space, and
	// InstanceTypes of each instance (unknown where not followed: an
	// instance made by instantiation, an alias of an unknown export).
	TypeSpace, InstanceTypes []*Type
	// Size is how many entries each index space holds.
	Size [numSorts]uint32
	// Defs is, per index space except core types, what defined each
	// entry, in index order.
	Defs [numSorts][]Def
	// Offset of this component's preamble in the outermost binary.
	Offset int
}

// DefKind is the construct that defined an index-space entry.
type DefKind byte

const (
	DefCoreModule   DefKind = iota // CoreModules[Index]
	DefComponent                   // Components[Index]
	DefCoreInstance                // CoreInstances[Index]
	DefInstance                    // Instances[Index]
	DefAlias                       // Aliases[Index]
	DefCanon                       // Canons[Index]
	DefImport                      // Imports[Index]
	DefExport                      // Exports[Index] (an export adds to its sort)
	DefType                        // a type definition (Index -1)
	DefResource                    // a resource type; Index is its destructor core func or -1
)

// Def is one index-space entry's definition.
type Def struct {
	Kind  DefKind
	Index int
}

// CoreModule is an embedded core module; Bytes aliases the input.
type CoreModule struct {
	Offset int
	Bytes  []byte
}

// CoreInstance is `instantiate module with args` or a bag of exports.
type CoreInstance struct {
	Offset int
	// Module is the instantiated core module; -1 for inline exports.
	Module int64
	Args   []Ref // Name: the import module name; Sort: SortCoreInstance
	// Exports are the inline exports (Module == -1).
	Exports []Ref
}

// Ref is a named reference into an index space.
type Ref struct {
	Name  string
	Sort  Sort
	Index uint32
}

// Instance is a component instance: an instantiation or inline exports.
type Instance struct {
	Offset    int
	Component int64 // -1 for inline exports
	Args      []Ref
	Exports   []Ref
}

// AliasKind is where an alias points.
type AliasKind byte

const (
	AliasExport     AliasKind = iota // an export of a component instance
	AliasCoreExport                  // an export of a core instance
	AliasOuter                       // an item of an enclosing component
)

// Alias adds one item to the Sort index space.
type Alias struct {
	Offset int
	Sort   Sort
	Kind   AliasKind
	// Instance (export kinds) or Count, the outer depth (AliasOuter).
	Instance, Count uint32
	Name            string
	Index           uint32 // AliasOuter
}

// CanonKind is a canonical built-in.
type CanonKind byte

const (
	CanonLift CanonKind = iota
	CanonLower
	CanonResourceNew
	CanonResourceDrop
	CanonResourceRep
)

var canonNames = [...]string{"canon lift", "canon lower", "canon resource.new", "canon resource.drop", "canon resource.rep"}

func (k CanonKind) String() string { return canonNames[k] }

// Canon is one canon definition with its options.
type Canon struct {
	Offset int
	Kind   CanonKind
	// Func is the core func (lift) or component func (lower) index.
	Func uint32
	// Type is the func type (lift) or the resource type (resource.*).
	Type uint32
	// Memory, Realloc and PostReturn are core indices, -1 when absent.
	Memory, Realloc, PostReturn int64
}

// Extern is an import: a name and what it must be.
type Extern struct {
	Offset int
	Name   string
	Sort   Sort   // SortCoreModule, SortFunc, SortValue, SortType, SortComponent, SortInstance
	Type   uint32 // the type index the description names (0 for a resource bound)
}

// Export is a component export of an item in this component.
type Export struct {
	Offset int
	Name   string
	Sort   Sort
	Index  uint32
}

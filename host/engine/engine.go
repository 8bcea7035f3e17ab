// Package engine is the seam between the host and a WebAssembly engine.
// Two implementations: wazero (host/engine/wazero, the default, pure Go)
// and wasmtime (host/engine/wasmtime, build tag "wasmtime", cgo).
package engine

import (
	"context"
	"errors"
	"fmt"
)

// Everything above this seam (the Canonical ABI, handle tables, the pool)
// is engine-neutral.

// ValueType is a core wasm value type.
type ValueType byte

const (
	I32 ValueType = 0x7f
	I64 ValueType = 0x7e
	F32 ValueType = 0x7d
	F64 ValueType = 0x7c
)

func (v ValueType) String() string {
	switch v {
	case I32:
		return "i32"
	case I64:
		return "i64"
	case F32:
		return "f32"
	case F64:
		return "f64"
	}
	return fmt.Sprintf("valtype(%#x)", byte(v))
}

// Memory is a guest's linear memory as seen during one host call. Reads
// copy out; nothing keeps slices of guest memory past the call.
type Memory interface {
	// Read returns a copy of n bytes at off, or false when out of range.
	Read(off, n uint32) ([]byte, bool)
	// Write copies b to off, or returns false when out of range.
	Write(off uint32, b []byte) bool
	// Size is the current size in bytes.
	Size() uint32
}

// Caller is the guest instance that called a host function.
type Caller interface {
	Memory() Memory
	// Realloc calls the guest's exported cabi_realloc.
	Realloc(ctx context.Context, oldPtr, oldSize, align, newSize uint32) (uint32, error)
}

// HostFunc is one core host function. Fn reads its params from stack and
// writes its results to stack[0:len(Results)] (stack is at least
// max(len(Params), len(Results)) long). To trap, Fn panics with a *Trap;
// the engine turns it into a call error and the instance is discarded.
type HostFunc struct {
	Module, Name    string
	Params, Results []ValueType
	Fn              func(ctx context.Context, c Caller, stack []uint64)
}

// FuncDef describes a module's import or export.
type FuncDef struct {
	Module, Name    string // Module is empty for exports
	Params, Results []ValueType
}

// EngineConfig is engine-neutral configuration.
type EngineConfig struct {
	// CacheDir, if set, holds compiled modules across runs.
	CacheDir string
	// MemoryLimitPages caps each instance's linear memory (0: engine max).
	MemoryLimitPages uint32
}

// Engine compiles modules and links them against the host functions given
// at construction: each implementation has
//
//	func New(ctx context.Context, cfg engine.EngineConfig, funcs []engine.HostFunc) (engine.Engine, error)
//
// WASI preview1 (the subset the host grants guests) is provided by the
// engine implementation itself, with no preopens, empty args and env.
type Engine interface {
	Name() string
	Compile(ctx context.Context, wasm []byte) (Module, error)
	Close(ctx context.Context) error
}

// Module is a compiled guest module.
type Module interface {
	Imports() []FuncDef
	Exports() []FuncDef
	// Instantiate creates a new instance and runs its _initialize export if
	// present. Stdout and stderr of WASI fd_write go to the given writers.
	Instantiate(ctx context.Context, cfg InstanceConfig) (Instance, error)
	Close(ctx context.Context) error
}

// InstanceConfig carries per-instance settings.
type InstanceConfig struct {
	// Name is used in traps and logs (capsule name plus instance number).
	Name           string
	Stdout, Stderr interface{ Write([]byte) (int, error) }
	// MemoryLimitPages caps this instance's linear memory below the
	// engine's EngineConfig.MemoryLimitPages (0 or more: the engine's).
	// As at the engine's limit, a memory.grow past it returns -1, and a
	// module whose memory starts above it fails to instantiate.
	MemoryLimitPages uint32
}

// Instance is one live guest instance. Not safe for concurrent calls.
type Instance interface {
	// Call invokes an export. ctx is passed through to host functions; its
	// deadline or cancellation interrupts the guest (ErrInterrupted).
	// A trap returns a *Trap; the instance must then be discarded.
	Call(ctx context.Context, export string, params ...uint64) ([]uint64, error)
	Memory() Memory
	Close(ctx context.Context) error
}

// ErrInterrupted is returned when a call's context ended while guest code
// ran. Wrapped with context.DeadlineExceeded or context.Canceled.
var ErrInterrupted = errors.New("guest interrupted")

// Trap is a guest call aborted by the host or the engine.
type Trap struct {
	Reason string
}

func (t *Trap) Error() string { return "trap: " + t.Reason }

// Trapf panics with a *Trap; for use inside HostFunc.Fn only.
func Trapf(format string, args ...any) {
	panic(&Trap{Reason: fmt.Sprintf(format, args...)})
}

// ExternKind is the kind of a core instance export that another core
// instance of the same Store can import.
type ExternKind byte

const (
	ExternFunc ExternKind = iota
	ExternTable
	ExternMemory
	ExternGlobal
)

func (k ExternKind) String() string {
	switch k {
	case ExternFunc:
		return "func"
	case ExternTable:
		return "table"
	case ExternMemory:
		return "memory"
	case ExternGlobal:
		return "global"
	}
	return fmt.Sprintf("extern(%d)", byte(k))
}

// Extern is one item of a Store: an export of one of its instances or a
// host function made with Store.Funcs. It is only valid in its Store.
type Extern interface {
	Kind() ExternKind
}

// Imports satisfies a core module's imports: module name, then field
// name, then the item.
type Imports map[string]map[string]Extern

// Linker is implemented by an Engine that can link several core
// instances together, which a component's core instance graph needs
// (the preview1 adapter imports the main module's memory, the shim's
// funcref table is filled by another instance). An Engine without it
// cannot run components: ErrLinkUnsupported.
type Linker interface {
	// NewStore creates an empty group of linked instances. cfg's stdout,
	// stderr and memory limit apply to every instance in it; the memory
	// limit applies to each memory separately.
	NewStore(ctx context.Context, cfg InstanceConfig) (Store, error)
}

// ErrLinkUnsupported: the engine cannot link core instances together.
var ErrLinkUnsupported = errors.New("engine cannot link core instances")

// ErrLink is an instantiation in a Store refused before the engine ran
// anything: an import not given, or an extern of the wrong kind or store.
var ErrLink = errors.New("core instance link")

// Store is a group of core instances whose imports are satisfied by each
// other's exports and by its own host functions. Nothing in a Store
// resolves against the Engine's host functions or its WASI: what an
// instance imports is exactly what Instantiate is given. Closing the
// Store closes every instance in it. Not safe for concurrent use.
type Store interface {
	// Instantiate instantiates m with imports and runs its start
	// function, if any (no _initialize: that is the caller's to call).
	Instantiate(ctx context.Context, m Module, imports Imports) (StoreInstance, error)
	// Funcs makes host functions items of this Store (their Module and
	// Name are only for errors). Fn's Caller is the calling instance.
	Funcs(ctx context.Context, fs []HostFunc) ([]Extern, error)
	// Call calls a func extern; errors as Instance.Call.
	Call(ctx context.Context, fn Extern, params ...uint64) ([]uint64, error)
	// Memory is a memory extern's view (nil, false for another kind).
	Memory(mem Extern) (Memory, bool)
	// FuncType is a func extern's core type.
	FuncType(fn Extern) (params, results []ValueType, ok bool)
	Close(ctx context.Context) error
}

// StoreInstance is one core instance in a Store.
type StoreInstance interface {
	// Export is the export called name, or false.
	Export(name string) (Extern, bool)
}

package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
)

// Error classes. Every error the Host returns matches one of them with
// errors.Is, and its message names the capsule (and the tool, the import
// or the manifest key) that was wrong.
var (
	// Load time.
	ErrEngine   = errors.New("wasm engine unavailable")
	ErrChecksum = errors.New("module checksum mismatch")
	ErrImport   = errors.New("module import not served")
	ErrExport   = errors.New("module export missing or mistyped")
	ErrPolicy   = errors.New("capsule policy refused")
	ErrDescribe = errors.New("capsule describe failed")

	// Call time.
	ErrUnknownCapsule   = errors.New("unknown capsule")
	ErrUnknownTool      = errors.New("unknown tool")
	ErrInvalidPrincipal = errors.New("invalid principal")
	ErrInvalidInput     = errors.New("invalid tool input")
	ErrTimeout          = errors.New("tool call timed out")
	ErrCancelled        = errors.New("tool call cancelled")
	ErrTrap             = errors.New("guest trapped")
	// ErrMemoryLimit: a guest trapped with its linear memory at its limit
	// (always with ErrTrap; see TrapError).
	ErrMemoryLimit = errors.New("guest linear memory limit reached")
	ErrToolFailed  = errors.New("tool returned an error")
	ErrInstance    = errors.New("cannot create a guest instance")

	// ErrClosed: the Host was closed.
	ErrClosed = errors.New("host closed")
)

// ToolError is a tool's own `err` result: the call ran and the tool said
// no. The instance is healthy and went back to the pool.
type ToolError struct {
	Capsule, Tool string
	Message       string
}

func (e *ToolError) Error() string {
	return fmt.Sprintf("capsule %q tool %q: %s", e.Capsule, e.Tool, e.Message)
}

func (e *ToolError) Unwrap() error { return ErrToolFailed }

// InvalidInputError is tool input that the tool's declared JSON Schema
// refuses (or that is not JSON at all, Rule "json"): nothing ran. Path is
// the RFC 6901 JSON Pointer of the offending value ("": the whole input),
// Rule the schema keyword that failed ("minimum", "required", "type",
// "additionalProperties", ...), Detail the validator's words.
type InvalidInputError struct {
	Capsule, Tool string
	Path, Rule    string
	Detail        string
}

func (e *InvalidInputError) Error() string {
	at := e.Path
	if at == "" {
		at = "(root)"
	}
	what := e.Rule + ": " + e.Detail
	if strings.HasPrefix(e.Detail, e.Rule+":") { // the validator's words often name the rule already
		what = e.Detail
	}
	return fmt.Sprintf("capsule %q tool %q: %v at %s: %s", e.Capsule, e.Tool, ErrInvalidInput, at, what)
}

func (e *InvalidInputError) Unwrap() error { return ErrInvalidInput }

// TrapError is a call aborted by a trap (a wasm fault or a host-detected
// ABI violation). The instance was discarded; the pool makes a new one.
type TrapError struct {
	Capsule, Tool string
	Instance      uint64
	Reason        string
	// MemoryBytes is the instance's linear memory when it trapped,
	// MemoryLimit its limit (Config.GuestMemoryBytes or the manifest's
	// pool.memory_bytes). When the memory was at the limit, the trap is
	// blamed on it: Reason names the limit and errors.Is(err,
	// ErrMemoryLimit) holds.
	MemoryBytes, MemoryLimit int64
	memoryLimit              bool
	trap                     *engine.Trap
}

func (e *TrapError) Error() string {
	return fmt.Sprintf("capsule %q tool %q: guest trapped on instance %d: %s", e.Capsule, e.Tool, e.Instance, e.Reason)
}

func (e *TrapError) Unwrap() []error {
	if e.memoryLimit {
		return []error{ErrTrap, ErrMemoryLimit, e.trap}
	}
	return []error{ErrTrap, e.trap}
}

// TimeoutError is a call that reached its deadline, either while waiting
// for a free instance (Waiting) or while the guest ran (it was interrupted
// and the instance discarded).
type TimeoutError struct {
	Capsule, Tool string
	After         time.Duration
	Waiting       bool
}

func (e *TimeoutError) Error() string {
	what := "interrupted after"
	if e.Waiting {
		what = "no free instance within"
	}
	return fmt.Sprintf("capsule %q tool %q: timed out: %s %v", e.Capsule, e.Tool, what, e.After.Round(time.Millisecond))
}

func (e *TimeoutError) Unwrap() []error { return []error{ErrTimeout, context.DeadlineExceeded} }

// ImportError is a module import this host does not serve.
type ImportError struct {
	Capsule, Module, Name string
	// Reason says what is wrong ("not served", "no such function", a
	// signature mismatch).
	Reason string
	// Served lists the module names of the same package this host serves.
	Served []string
}

func (e *ImportError) Error() string {
	s := fmt.Sprintf("capsule %q: import %q %q: %s", e.Capsule, e.Module, e.Name, e.Reason)
	if len(e.Served) > 0 {
		s += " (this host serves " + strings.Join(e.Served, ", ") + ")"
	}
	return s
}

func (e *ImportError) Unwrap() error { return ErrImport }

package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
)

// Instance is the per-instance state of one guest instance: its handle
// table for process-handle (both versions; each entry is tagged with its
// version's resource type, so a 1.0.0 handle used with a 1.1.0 method
// traps, as two distinct resource types would in a component).
//
// The Host creates one Instance per wasm instance, puts it in every call's
// context (WithInstance) and calls Reset when the instance goes back to
// the pool or is discarded.
type Instance struct {
	mu    sync.Mutex
	table cabi.Table[*registry.Handle]
	// Log receives handle drops that failed (nil: slog.Default()): a drop
	// has no result to report to the guest, and Reset returns its errors.
	Log *slog.Logger
	// MaxHandles caps the live process-handle entries (0:
	// DefaultMaxHandles). The Canonical ABI's own bound (2^28-1) is no
	// bound for the host's memory: a guest attaching in a loop grew the
	// table without limit.
	MaxHandles int
}

// DefaultMaxHandles is Instance.MaxHandles' default: far above what a
// tool call needs (the registry retains 32 processes per principal by
// default), far below what hurts the host.
const DefaultMaxHandles = 1024

// ErrHandleLimit is the class of a full handle table. It is a quota
// (errors.Is(err, registry.ErrQuota)), so the guest gets error-code
// quota, not a trap: it can drop handles and go on.
var ErrHandleLimit = fmt.Errorf("process-handle table full: %w", registry.ErrQuota)

// HandleLimitError is a handle the table had no room for.
type HandleLimitError struct{ Limit int }

func (e *HandleLimitError) Error() string {
	return fmt.Sprintf("%v: %d live handles in this instance (drop some first)", ErrHandleLimit, e.Limit)
}

func (e *HandleLimitError) Unwrap() error { return ErrHandleLimit }

func (i *Instance) maxHandles() int {
	if i.MaxHandles > 0 {
		return i.MaxHandles
	}
	return DefaultMaxHandles
}

// room is nil when one more handle fits, checked before a spawn or an
// attach so that no process is started only to be dropped.
func (i *Instance) room() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if n := i.maxHandles(); i.table.Len() >= n {
		return &HandleLimitError{Limit: n}
	}
	return nil
}

// NewInstance returns an Instance with an empty handle table.
func NewInstance() *Instance { return &Instance{} }

type instanceKey struct{}

// WithInstance returns ctx carrying i for the host functions.
func WithInstance(ctx context.Context, i *Instance) context.Context {
	return context.WithValue(ctx, instanceKey{}, i)
}

// InstanceFrom returns the Instance carried by ctx.
func InstanceFrom(ctx context.Context) (*Instance, bool) {
	i, ok := ctx.Value(instanceKey{}).(*Instance)
	return i, ok && i != nil
}

// Handles is the number of live process-handle entries.
func (i *Instance) Handles() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.table.Len()
}

// Reset drops every handle with its proper semantics (a spawn-background
// handle reaps its process, an attached handle detaches: registry
// Handle.Drop knows which) and empties the table, so handle indices start
// at 1 again. It returns every drop error, joined; the table is empty
// either way.
func (i *Instance) Reset(ctx context.Context) error {
	i.mu.Lock()
	hs := i.table.Drain()
	i.mu.Unlock()
	var errs []error
	for _, h := range hs {
		if err := h.Drop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("reset: dropping process-handle: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (i *Instance) add(rt string, h *registry.Handle) (uint32, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if n := i.maxHandles(); i.table.Len() >= n {
		return 0, &HandleLimitError{Limit: n}
	}
	return i.table.Add(rt, h)
}

func (i *Instance) get(rt string, idx uint32) (*registry.Handle, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.table.Get(rt, idx)
}

func (i *Instance) remove(rt string, idx uint32) (*registry.Handle, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.table.Remove(rt, idx)
}

func (i *Instance) logger() *slog.Logger {
	if i.Log != nil {
		return i.Log
	}
	return slog.Default()
}

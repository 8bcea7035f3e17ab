package registry

// STUB: the registry helper replaces this file. The method set and
// signatures are the agreed API used by host/.

import (
	"context"
	"time"
)

// Registry is the host's one process registry.
type Registry struct{}

func New(cfg Config) (*Registry, error) { return &Registry{}, nil }

// RegisterCapsule adds or replaces (reload, upgrade) a capsule's policy.
// Replacing keeps the capsule's processes.
func (r *Registry) RegisterCapsule(name string, p CapsulePolicy) error { return nil }

// RemoveCapsule stops and forgets every process of the capsule (reason removed).
func (r *Registry) RemoveCapsule(ctx context.Context, name string) error { return nil }

// EvictPrincipal stops and forgets every process of a principal (reason evicted).
func (r *Registry) EvictPrincipal(ctx context.Context, principal string) error { return nil }

// Shutdown stops everything (reason removed) and stops the reaper.
func (r *Registry) Shutdown(ctx context.Context) error { return nil }

// Operator views: across principals.
func (r *Registry) OperatorList(f OperatorFilter) []Info   { return nil }
func (r *Registry) OperatorStatus(id string) (Info, error) { return Info{}, ErrNoSuchProcess }
func (r *Registry) OperatorReadSince(id string, s Stream, cursor *string, max uint32) (LogChunk, error) {
	return LogChunk{}, ErrNoSuchProcess
}
func (r *Registry) OperatorStop(ctx context.Context, id string, grace *time.Duration) (Exit, error) {
	return Exit{}, ErrNoSuchProcess
}

// Caller-scoped calls (the Caller comes from ctx).
func (r *Registry) Spawn(ctx context.Context, req SpawnRequest) (Result, error) {
	return Result{}, ErrInternal
}
func (r *Registry) SpawnBackground(ctx context.Context, req SpawnRequest) (*Handle, error) {
	return nil, ErrInternal
}
func (r *Registry) SpawnPersistent(ctx context.Context, req SpawnRequest, o PersistOptions) (string, error) {
	return "", ErrInternal
}
func (r *Registry) Attach(ctx context.Context, id string) (*Handle, error) {
	return nil, ErrNoSuchProcess
}
func (r *Registry) List(ctx context.Context, labelFilter *string) ([]Info, error) { return nil, nil }
func (r *Registry) Status(ctx context.Context, id string) (Info, error) {
	return Info{}, ErrNoSuchProcess
}
func (r *Registry) StatusMany(ctx context.Context, ids []string) ([]Info, error) { return nil, nil }
func (r *Registry) ReadSince(ctx context.Context, id string, s Stream, cursor *string, max uint32) (LogChunk, error) {
	return LogChunk{}, ErrNoSuchProcess
}
func (r *Registry) ReadLogs(ctx context.Context, id string) (Logs, error) {
	return Logs{}, ErrNoSuchProcess
}
func (r *Registry) WriteStdin(ctx context.Context, id string, data []byte) (int, error) {
	return 0, ErrNoSuchProcess
}
func (r *Registry) CloseStdin(ctx context.Context, id string) error       { return ErrNoSuchProcess }
func (r *Registry) Signal(ctx context.Context, id string, s Signal) error { return ErrNoSuchProcess }
func (r *Registry) Wait(ctx context.Context, id string, timeout time.Duration) (Exit, error) {
	return Exit{}, ErrNoSuchProcess
}
func (r *Registry) Stop(ctx context.Context, id string, grace *time.Duration) (Exit, error) {
	return Exit{}, ErrNoSuchProcess
}
func (r *Registry) Release(ctx context.Context, id string) error { return ErrNoSuchProcess }
func (r *Registry) PollEvents(ctx context.Context, cursor uint64, max uint32, timeout time.Duration) (EventBatch, error) {
	return EventBatch{}, nil
}

// Handle is one instance's process-handle resource: owning (from
// SpawnBackground: Drop kills and reaps) or attached (from Attach: Drop
// detaches). Every method re-checks that ctx's Caller owns it.
type Handle struct{}

func (h *Handle) ReadLogs(ctx context.Context) (Logs, error)               { return Logs{}, ErrClosed }
func (h *Handle) WriteStdin(ctx context.Context, data []byte) (int, error) { return 0, ErrClosed }
func (h *Handle) CloseStdin(ctx context.Context) error                     { return ErrClosed }
func (h *Handle) Signal(ctx context.Context, s Signal) error               { return ErrClosed }
func (h *Handle) Kill(ctx context.Context) (Exit, error)                   { return Exit{}, ErrClosed }
func (h *Handle) Wait(ctx context.Context, timeout *time.Duration) (Exit, error) {
	return Exit{}, ErrClosed
}
func (h *Handle) WaitWithOutput(ctx context.Context, timeout *time.Duration) (Result, error) {
	return Result{}, ErrClosed
}
func (h *Handle) OSPid(ctx context.Context) (uint32, error) { return 0, ErrClosed }

// Attached reports whether Drop detaches (true) or reaps (false).
func (h *Handle) Attached() bool { return false }

// Drop ends this handle: reap (owning) or detach (attached). Idempotent.
func (h *Handle) Drop(ctx context.Context) error { return nil }

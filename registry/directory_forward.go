package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// Routing: a call for a process another node holds is forwarded to that
// node (Config.Forwarder: the daemon's authenticated node-to-node
// channel) with the caller's (capsule, principal), and the holder runs it
// through its own public operation, so ownership is checked again there.
// A forwarded call is never forwarded again.

// Forwarder sends a call to the node that holds its process. The error
// is the holder's, rebuilt by DecodeRemoteError, or ErrUnavailable
// naming the node when it cannot be reached.
type Forwarder interface {
	Forward(ctx context.Context, node string, call RemoteCall) (json.RawMessage, error)
}

// RemoteCall is one forwarded operation.
type RemoteCall struct {
	Op      string         `json:"op"`
	Caller  Caller         `json:"caller"`
	ID      string         `json:"id"`
	Stream  Stream         `json:"stream,omitempty"`
	Cursor  *string        `json:"cursor,omitempty"`
	Max     uint32         `json:"max,omitempty"`
	Data    []byte         `json:"data,omitempty"`
	Signal  Signal         `json:"signal,omitempty"`
	Timeout time.Duration  `json:"timeout,omitempty"`
	Grace   *time.Duration `json:"grace,omitempty"`
	// Spawn and Persist: a placed spawn-persistent (placement.go).
	Spawn   *SpawnRequest   `json:"spawn,omitempty"`
	Persist *PersistOptions `json:"persist,omitempty"`
	Label   *string         `json:"label,omitempty"` // list: the label filter
	Seq     uint64          `json:"seq,omitempty"`   // poll-events: the cursor
	// From and Request make a placed spawn idempotent (spawn_dedup.go):
	// the calling node (the daemon sets it from the authenticated peer)
	// and a random ID its retries repeat.
	From    string `json:"from,omitempty"`
	Request string `json:"request,omitempty"`
}

// The forwarded operations.
const (
	OpStatus     = "status"
	OpReadSince  = "read-since"
	OpWriteStdin = "write-stdin"
	OpCloseStdin = "close-stdin"
	OpSignal     = "signal"
	OpWait       = "wait"
	OpStop       = "stop"
	OpRelease    = "release"
	// OpSpawnPersistent runs a spawn placement chose this node for.
	OpSpawnPersistent = "spawn-persistent"
	// OpList is the holder's part of a cluster-wide list-processes.
	OpList = "list"
	// OpPollEvents is a non-blocking poll of the holder's events for the
	// caller (events_relay.go).
	OpPollEvents = "poll-events"
)

// TraceSent wraps ctx for an HTTP forwarder's request and reports
// whether the request may have reached the node: once a connection is
// obtained, bytes may have left. A failure before that is a
// HeldElsewhereError (nothing ran: another node may be tried), after it
// an AnswerLostError (the call may have run: a spawn is retried on the
// same node with the same request ID).
func TraceSent(ctx context.Context) (context.Context, func() bool) {
	var sent atomic.Bool
	tr := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { sent.Store(true) }}
	return httptrace.WithClientTrace(ctx, tr), sent.Load
}

type noForwardKey struct{}

// forwardAs forwards call when err says another node holds the process
// (and forwarding is configured, and this is not already a forwarded
// call); otherwise it returns err.
func forwardAs[T any](ctx context.Context, r *Registry, err error, call RemoteCall) (T, error) {
	var zero T
	var he *HeldElsewhereError
	if !errors.As(err, &he) || r.cfg.Forwarder == nil || ctx.Value(noForwardKey{}) != nil {
		return zero, err
	}
	c, _ := CallerFrom(ctx) // resolve found the caller: present
	call.Caller = c
	raw, ferr := r.cfg.Forwarder.Forward(ctx, he.Node, call)
	if ferr != nil || call.Op == OpRelease {
		if ferr == nil || errors.Is(ferr, ErrNoSuchProcess) || errors.As(ferr, new(*HeldElsewhereError)) || errors.As(ferr, new(*AnswerLostError)) {
			r.holders.drop(r.dirKeyOf(call.ID))
		}
	}
	if ferr != nil {
		return zero, ferr
	}
	var out T
	if len(raw) > 0 {
		if jerr := json.Unmarshal(raw, &out); jerr != nil {
			return zero, fmt.Errorf("%w: node %q answered %s with %v", ErrInternal, he.Node, call.Op, jerr)
		}
	}
	return out, nil
}

// ServeRemote runs a forwarded call as its caller (the holder's own
// checks apply: another principal gets ErrNoSuchProcess).
func (r *Registry) ServeRemote(ctx context.Context, call RemoteCall) (json.RawMessage, error) {
	if err := validCapsuleName(call.Caller.Capsule); err != nil {
		return nil, err
	}
	if err := ValidPrincipal(call.Caller.Principal); err != nil {
		return nil, err
	}
	ctx = WithCaller(context.WithValue(ctx, noForwardKey{}, true), call.Caller)
	var out any
	var err error
	switch call.Op {
	case OpStatus:
		out, err = r.Status(ctx, call.ID)
	case OpReadSince:
		out, err = r.ReadSince(ctx, call.ID, call.Stream, call.Cursor, call.Max)
	case OpWriteStdin:
		out, err = r.WriteStdin(ctx, call.ID, call.Data)
	case OpCloseStdin:
		err = r.CloseStdin(ctx, call.ID)
	case OpSignal:
		err = r.Signal(ctx, call.ID, call.Signal)
	case OpWait:
		out, err = r.Wait(ctx, call.ID, call.Timeout)
	case OpStop:
		out, err = r.Stop(ctx, call.ID, call.Grace)
	case OpRelease:
		err = r.Release(ctx, call.ID)
	case OpSpawnPersistent:
		if call.Spawn == nil || call.Persist == nil {
			return nil, fmt.Errorf("%w: a forwarded spawn without its request", ErrInvalidInput)
		}
		out, err = r.spawnForwarded(ctx, call)
	case OpList:
		out, err = r.List(ctx, call.Label)
	case OpPollEvents:
		out, err = r.PollEvents(ctx, call.Seq, call.Max, 0)
	default:
		return nil, fmt.Errorf("%w: unknown forwarded operation %q", ErrInvalidInput, call.Op)
	}
	if err != nil || out == nil {
		return nil, err
	}
	return json.Marshal(out)
}

// RemoteError is an error on the wire between nodes: its class (one of
// the registry's sentinels, by name), message and, for a torn stdin
// write, how much was written.
type RemoteError struct {
	Class   string `json:"class"`
	Message string `json:"message"`
	Written int64  `json:"written,omitempty"`
}

var remoteClasses = []struct {
	name string
	err  error
}{
	{"capability-denied", ErrCapabilityDenied}, {"invalid-input", ErrInvalidInput},
	{"boundary-escape", ErrBoundaryEscape}, {"quota", ErrQuota}, {"node-full", ErrNodeFull}, {"too-large", ErrTooLarge},
	{"closed", ErrClosed}, {"cancelled", ErrCancelled}, {"wait-timeout", ErrWaitTimeout},
	{"unavailable", ErrUnavailable}, {"no-such-process", ErrNoSuchProcess},
	{"registry-full", ErrRegistryFull}, {"persist-unsupported", ErrPersistUnsupported},
}

// EncodeRemoteError is err for the wire (the holder's side).
func EncodeRemoteError(err error) RemoteError {
	var tw *TornWriteError
	if errors.As(err, &tw) {
		return RemoteError{Class: "torn-write", Message: err.Error(), Written: tw.Written}
	}
	for _, c := range remoteClasses {
		if errors.Is(err, c.err) {
			return RemoteError{Class: c.name, Message: err.Error()}
		}
	}
	return RemoteError{Class: "internal", Message: err.Error()}
}

// DecodeRemoteError rebuilds the holder's error on the caller's side: the
// same class (errors.Is holds), the holder's message, the node named.
func DecodeRemoteError(e RemoteError, node string) error {
	if e.Class == "no-such-process" {
		return ErrNoSuchProcess // one answer for every kind of "not yours"
	}
	if e.Class == "torn-write" {
		return &TornWriteError{Written: e.Written, Cause: fmt.Errorf("%w: on node %q: %s", ErrUnavailable, node, e.Message)}
	}
	for _, c := range remoteClasses {
		if c.name == e.Class {
			return fmt.Errorf("%w: on node %q: %s", c.err, node, e.Message)
		}
	}
	return fmt.Errorf("%w: on node %q: %s", ErrInternal, node, e.Message)
}

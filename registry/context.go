package registry

import "context"

// Caller is who makes a call: the capsule and the principal it acts for.
// It travels in the context, never as a loose argument.
type Caller struct {
	Capsule   string
	Principal string
	// Fallback marks the capsule's owner-fallback principal, used when the
	// call carried none. It cannot hold persistent processes.
	Fallback bool
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller carried by ctx.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

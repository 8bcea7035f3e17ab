package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
)

// idPattern matches a process ID: 52 characters of lowercase RFC 4648
// base32, as a whole word (a longer run, e.g. inside base64, is not an ID).
var idPattern = regexp.MustCompile(`\b[a-z2-7]{52}\b`)

// RedactHandler keeps process IDs out of the log whatever writes them: a
// guest's error text or stderr line, a wrapped error. Every 52-character
// base32 run in the message or a string/error attribute becomes
// "proc:<LogID>", the registry's keyed short hash (or "proc:?" before the
// registry exists). Process IDs are capabilities; logs are read widely.
type RedactHandler struct {
	inner slog.Handler
	hash  *atomic.Pointer[func(string) string]
}

// NewRedactHandler wraps h.
func NewRedactHandler(h slog.Handler) *RedactHandler {
	return &RedactHandler{inner: h, hash: &atomic.Pointer[func(string) string]{}}
}

// SetHasher installs the function that names an ID in logs
// (Registry.LogID).
func (h *RedactHandler) SetHasher(f func(string) string) { h.hash.Store(&f) }

func (h *RedactHandler) redact(s string) string {
	if len(s) < 52 {
		return s
	}
	f := h.hash.Load()
	return idPattern.ReplaceAllStringFunc(s, func(id string) string {
		if f == nil {
			return "proc:?"
		}
		return "proc:" + (*f)(id)
	})
}

func (h *RedactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.redact(v.String()))
	case slog.KindGroup:
		g := v.Group()
		out := make([]any, len(g))
		for i, x := range g {
			out[i] = h.attr(x)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, h.redact(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, h.redact(x.String()))
		case []byte:
			return slog.String(a.Key, h.redact(string(x)))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// Enabled implements slog.Handler.
func (h *RedactHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h *RedactHandler) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, h.redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(h.attr(a))
		return true
	})
	return h.inner.Handle(ctx, nr)
}

// WithAttrs implements slog.Handler.
func (h *RedactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = h.attr(a)
	}
	return &RedactHandler{inner: h.inner.WithAttrs(out), hash: h.hash}
}

// WithGroup implements slog.Handler.
func (h *RedactHandler) WithGroup(name string) slog.Handler {
	return &RedactHandler{inner: h.inner.WithGroup(name), hash: h.hash}
}

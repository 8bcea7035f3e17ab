package wasip2

import (
	"context"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
)

// wasi:filesystem with zero preopens: get-directories is empty, so no
// descriptor can exist. Every descriptor method still answers (with
// error-code bad-descriptor) rather than trapping, and nothing here
// touches the host filesystem.

const rtDescriptor = "descriptor"

var errorCodes = []string{"access", "would-block", "already", "bad-descriptor", "busy", "deadlock", "quota", "exist",
	"file-too-large", "illegal-byte-sequence", "in-progress", "interrupted", "invalid", "io", "is-directory", "loop",
	"too-many-links", "message-size", "name-too-long", "no-device", "no-entry", "no-lock", "insufficient-memory",
	"insufficient-space", "not-directory", "not-empty", "not-recoverable", "unsupported", "no-tty", "no-such-device",
	"overflow", "not-permitted", "pipe", "read-only", "invalid-seek", "text-file-busy", "cross-device"}

var tErrorCode = cabi.Enum("error-code", errorCodes...)

// badDescriptor is error-code bad-descriptor.
var badDescriptor = cabi.Err(uint32(3))

func filesystemDefs() []def {
	const types, pre = "wasi:filesystem/types", "wasi:filesystem/preopens"
	datetime := cabi.Record("datetime", cabi.F("seconds", cabi.U64), cabi.F("nanoseconds", cabi.U32))
	descType := cabi.Enum("descriptor-type", "unknown", "block-device", "character-device", "directory", "fifo", "symbolic-link", "regular-file", "socket")
	stat := cabi.Record("descriptor-stat", cabi.F("type", descType), cabi.F("link-count", cabi.U64), cabi.F("size", cabi.U64),
		cabi.F("data-access-timestamp", cabi.Option(datetime)), cabi.F("data-modification-timestamp", cabi.Option(datetime)),
		cabi.F("status-change-timestamp", cabi.Option(datetime)))
	// descriptor-flags is a flags of 6 labels: its ABI is a u8's.
	flags := cabi.U8
	fail := func(context.Context, *state, []cabi.Value) cabi.Value { return badDescriptor }
	m := func(name string, ok *cabi.Type, params ...cabi.Field) def {
		ps := append([]cabi.Field{self(rtDescriptor)}, params...)
		return def{types, cabi.NewFunc(method(rtDescriptor, name), cabi.Result(ok, tErrorCode), ps...), fail}
	}
	off := cabi.F("offset", cabi.U64)
	return []def{
		{pre, cabi.NewFunc("get-directories", cabi.List(cabi.Record("tuple", cabi.F("0", cabi.Own(rtDescriptor)), cabi.F("1", cabi.String)))),
			func(context.Context, *state, []cabi.Value) cabi.Value { return []cabi.Value{} }},
		{types, cabi.NewFunc("filesystem-error-code", cabi.Option(tErrorCode), cabi.F("err", cabi.Borrow(rtError))),
			func(_ context.Context, st *state, a []cabi.Value) cabi.Value {
				st.get(rtError, a[0])
				return cabi.None
			}},
		dropDef(types, rtDescriptor),
		dropDef(types, "directory-entry-stream"),
		m("read-via-stream", cabi.Own(rtInput), off),
		m("write-via-stream", cabi.Own(rtOutput), off),
		m("append-via-stream", cabi.Own(rtOutput)),
		m("get-flags", flags),
		m("get-type", descType),
		m("stat", stat),
		m("sync-data", nil),
		m("sync", nil),
		m("set-size", nil, cabi.F("size", cabi.U64)),
		m("read", cabi.Record("tuple", cabi.F("0", cabi.List(cabi.U8)), cabi.F("1", cabi.Bool)), cabi.F("length", cabi.U64), off),
		m("write", cabi.U64, cabi.F("buffer", cabi.List(cabi.U8)), off),
		m("read-directory", cabi.Own("directory-entry-stream")),
		m("create-directory-at", nil, cabi.F("path", cabi.String)),
		m("remove-directory-at", nil, cabi.F("path", cabi.String)),
		m("unlink-file-at", nil, cabi.F("path", cabi.String)),
		m("stat-at", stat, cabi.F("path-flags", cabi.U8), cabi.F("path", cabi.String)),
		m("open-at", cabi.Own(rtDescriptor), cabi.F("path-flags", cabi.U8), cabi.F("path", cabi.String), cabi.F("open-flags", cabi.U8), cabi.F("flags", flags)),
		m("readlink-at", cabi.String, cabi.F("path", cabi.String)),
		m("metadata-hash", cabi.Record("metadata-hash-value", cabi.F("lower", cabi.U64), cabi.F("upper", cabi.U64))),
	}
}

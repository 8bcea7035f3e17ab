//go:build !wasmtime

package enginetest

// taggedEngine: without -tags wasmtime, host-level tests use the host's
// default engine.
const taggedEngine = ""

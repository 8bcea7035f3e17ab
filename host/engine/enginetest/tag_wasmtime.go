//go:build wasmtime

package enginetest

// taggedEngine: a -tags wasmtime test build runs the host-level suites on
// wasmtime (CAPSULE_HOST_TEST_ENGINE=wazero runs them on wazero instead).
// Only the name: this package never imports the engine.
const taggedEngine = "wasmtime"

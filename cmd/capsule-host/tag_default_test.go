//go:build !wasmtime && !leanclient

package main

// taggedWasmtime: this test binary is the -tags wasmtime leg.
const taggedWasmtime = false

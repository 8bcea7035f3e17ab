//go:build wasmtime

package main

// taggedWasmtime: this test binary is the -tags wasmtime leg.
const taggedWasmtime = true

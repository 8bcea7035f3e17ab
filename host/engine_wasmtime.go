//go:build wasmtime

package host

import "github.com/capsule-host/capsule-host/host/engine/wasmtime"

// wasmtime is compiled in only with -tags wasmtime (cgo): a pure-Go build
// never links it.
func init() { RegisterEngine(wasmtime.Name, wasmtime.New) }

//go:build !wasip1

package rt

// Reset is a no-op outside wasm: there is no cabi_realloc there.
func Reset() {}

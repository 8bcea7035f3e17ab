//go:build !(cgo && linux)

package local

// cHelper: without cgo the exec helper is the Go one (helper.go).
const cHelper = false

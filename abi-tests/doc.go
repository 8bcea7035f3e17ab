// Package abitests is the Canonical ABI conformance suite of capsule-host.
// It lives in its own Go module so that its generator and test-only
// dependencies (go.bytecodealliance.org, wit-bindgen-go) stay out of the
// core module. Everything is in the _test.go files; see README.md.
package abitests

//go:generate go run ./cmd/genbindings .

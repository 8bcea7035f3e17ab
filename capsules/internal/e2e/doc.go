// Package e2e holds host-side end-to-end tests of the built capsules: they
// load capsules/testcap, capsules/testcap10, capsules/testcap12 and capsules/shell (the
// committed .wasm, checked against the pinned sha256) into a real Host
// with the real registry and the local backend, and call every tool.
package e2e

//go:build !race

package testutil

// Race reports whether the test binary was built with -race (see
// race_on.go).
const Race = false

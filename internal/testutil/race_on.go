//go:build race

package testutil

// Race reports whether the test binary was built with -race: a test
// whose cost under the race detector buys nothing the detector can find
// (a cold compile of a large guest by wazero's instrumented compiler)
// skips there, saying where it runs instead.
const Race = true

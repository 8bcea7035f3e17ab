// Command testcap is the conformance capsule: one tool per function of
// capsule:process@1.1.0 and @1.0.0 (see capsules/internal/testtools), so
// host end-to-end tests drive every import through real wasm.
package main

import "github.com/capsule-host/capsule-host/capsules/internal/testtools"

func init() {
	testtools.RegisterV11()
	testtools.RegisterV10()
	testtools.RegisterBench()
}

// main is empty: a reactor's tools are registered in init (_initialize).
func main() {}

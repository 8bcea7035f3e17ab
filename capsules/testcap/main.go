// Command testcap is the conformance capsule: one tool per function of
// capsule:process@1.1.0 and @1.0.0 (see capsules/internal/testtools), so
// host end-to-end tests drive every import through real wasm.
//
// Built with -tags capsule_v11only it leaves out the 1.0.0 tools: the
// form the component tests wrap. A core module importing both versions
// cannot be a component (wit-component merges the 1.0.0 imports into
// 1.1.0's, whose types differ, and the host refuses the result).
package main

import "github.com/capsule-host/capsule-host/capsules/internal/testtools"

func init() {
	testtools.RegisterV11(testtools.Process11())
	registerV10()
	testtools.RegisterBench()
	registerFaults()
}

// main is empty: a reactor's tools are registered in init (_initialize).
func main() {}

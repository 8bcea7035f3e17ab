// Command testcap12 is the conformance capsule of capsule:process@1.2.0:
// the 1.1.0 tools (capsules/internal/testtools) and one tool per function
// 1.2.0 adds (capsules/internal/testtools12), so host end-to-end tests drive the terminal tier through
// real wasm and the SDK's 1.2.0 bindings (capsules/sdk/terminal).
package main

import (
	"github.com/capsule-host/capsule-host/capsules/internal/testtools"
	"github.com/capsule-host/capsule-host/capsules/internal/testtools12"
)

func init() {
	testtools.RegisterV11(tier11())
	testtools12.Register()
}

// main is empty: a reactor's tools are registered in init (_initialize).
func main() {}

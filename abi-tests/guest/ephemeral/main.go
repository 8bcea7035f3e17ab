//go:build wasip1

// Command ephemeral is the end-to-end conformance guest for the world
// capsule:guest/capsule-ephemeral@1.0.0 (imports
// capsule:process/host@1.0.0): its tools call every function of 1.0.0
// through the host's 1.1.0 implementation and check the results.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
package main

import (
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/checks"
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/p10"
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/rt"
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/tool"
)

func main() {}

func init() {
	rt.Serve([]rt.Tool{
		{Name: "echo", Desc: "Returns its input in data.echo.", Fn: checks.Echo},
		{Name: "ephemeral", Desc: "Calls every function of capsule:process@1.0.0.", Fn: func(r *rt.Report, _ string) { checks.Ephemeral(r, p10.Host) }},
	}, &tool.Describe, &tool.Call)
}

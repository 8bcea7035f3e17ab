//go:build wasip1

// Command full is the end-to-end conformance guest for the world
// capsule:guest/capsule@1.0.0 (imports capsule:process/host@1.1.0). Its
// tools call every function of 1.1.0 and check the results; each returns
// a JSON report (rt.Report) naming the WIT functions it called, or an
// error listing the failed checks.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
package main

import (
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/checks"
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/p11"
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/rt"
	"github.com/capsule-host/capsule-host/abi-tests/guest/internal/tool"
)

func main() {}

var c = p11.Host

func init() {
	rt.Serve([]rt.Tool{
		{Name: "echo", Desc: "Returns its input in data.echo.", Fn: checks.Echo},
		{Name: "ephemeral", Desc: "Calls every ephemeral-tier function of capsule:process@1.1.0.", Fn: func(r *rt.Report, _ string) { checks.Ephemeral(r, c) }},
		{Name: "persist_start", Desc: "Starts a persistent echo process; its ID is data.id.", Fn: func(r *rt.Report, _ string) { checks.PersistStart(r, c) }},
		{Name: "persist_use", Desc: "Calls every persistent-tier function on the process {\"id\"} and ends it.", Fn: func(r *rt.Report, in string) { checks.PersistUse(r, c, in) }},
		{Name: "persist_probe", Desc: "Reports status(id) and attach(id) of {\"id\"} in data.", Fn: func(r *rt.Report, in string) { checks.PersistProbe(r, c, in) }},
		{Name: "persist_denied", Desc: "Expects spawn-persistent to fail with persist-unsupported.", Fn: func(r *rt.Report, _ string) { checks.PersistDenied(r, c) }},
	}, &tool.Describe, &tool.Call)
}

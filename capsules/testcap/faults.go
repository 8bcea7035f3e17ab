package main

import (
	"os"
	"time"

	"github.com/capsule-host/capsule-host/capsules/sdk"
)

// registerFaults registers tools that fail the way a guest can fail the
// host, for tests of how a trap and a timeout are reported (the MCP front
// end's isError codes): exit ends the guest with proc_exit, which the host
// reports as a trap (and discards the instance); spin keeps it busy for
// duration_ms, which past the host's call timeout is a timeout. Here, not
// in testtools, so the other conformance capsules' modules stay as built.
func registerFaults() {
	sdk.Register(sdk.Tool{Name: "exit", Description: "Ends the guest with proc_exit(code): the host reports a trap.",
		InputSchema: `{"type":"object","additionalProperties":false,"required":["code"],"properties":{"code":{"type":"integer","minimum":0,"maximum":255}}}`,
		Handler: sdk.Handle(func(in struct {
			Code int `json:"code"`
		}) (any, error) {
			os.Exit(in.Code)
			return nil, nil
		})})
	sdk.Register(sdk.Tool{Name: "spin", Description: "Busy-loops for duration_ms and returns how many times it looped.",
		InputSchema: `{"type":"object","additionalProperties":false,"required":["duration_ms"],"properties":{"duration_ms":{"type":"integer","minimum":0,"maximum":600000}}}`,
		Handler: sdk.Handle(func(in struct {
			DurationMS int `json:"duration_ms"`
		}) (any, error) {
			end := time.Now().Add(time.Duration(in.DurationMS) * time.Millisecond)
			n := 0
			for time.Now().Before(end) {
				n++
			}
			return map[string]any{"loops": n}, nil
		})})
}

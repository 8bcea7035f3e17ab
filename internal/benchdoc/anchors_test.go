package main

import (
	"strings"
	"testing"
)

// anchorOutput holds figures for two anchor rows: the client pair (met on
// call, not met on logs) and the shutdown row through its "*" pattern
// (the last match, stop-500, counts) against the bwrap floor; P2 is present without its allocation
// check, so it is not measured.
const anchorOutput = `goos: linux
goarch: amd64
pkg: github.com/capsule-host/capsule-host/cmd/capsule-host
BenchmarkClientVsTmux-2   1   999 ns/op   2.1 lean-call-ms   0.3 lean-call-iqr-ms   4.0 tmux-new-ms   0.5 tmux-new-iqr-ms   5.0 lean-logs-ms   1 lean-logs-iqr-ms   2.5 tmux-capture-ms   0.1 tmux-capture-iqr-ms
BenchmarkShutdown/stop-20-2   1   999 ns/op   300 shutdown-ms
BenchmarkShutdown/floor-500-2   1   999 ns/op   1034 shutdown-ms
BenchmarkShutdown/stop-500-2   1   999 ns/op   5170 shutdown-ms
ok  	github.com/capsule-host/capsule-host/cmd/capsule-host	1.0s
pkg: github.com/capsule-host/capsule-host/host/process
BenchmarkImportPair-2   20   999 ns/op   69 noop-ns   6 noop-iqr-ns   140 str52-ns   9 str52-iqr-ns
ok  	github.com/capsule-host/capsule-host/host/process	1.0s
`

func TestAnchorRows(t *testing.T) {
	run, err := Parse(strings.NewReader(anchorOutput))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, r := range Rows(testEnv, run) {
		rows[r.Name] = r
	}
	call, logs := rows["CLI call vs tmux new-session -d"], rows["CLI logs vs tmux capture-pane -p"]
	if !call.Measured || !call.Met || call.Ratio != 2.1/4.0 {
		t.Errorf("call row = measured %v met %v ratio %v", call.Measured, call.Met, call.Ratio)
	}
	if !logs.Measured || logs.Met || logs.Ratio != 2 {
		t.Errorf("logs row = measured %v met %v ratio %v", logs.Measured, logs.Met, logs.Ratio)
	}
	sd := rows["shutdown with 500 processes"]
	if !sd.Measured || sd.Met || sd.OursV.Bench != "BenchmarkShutdown/stop-500" || sd.TheirsV == nil || sd.TheirsV.Bench != "BenchmarkShutdown/floor-500" {
		t.Errorf("shutdown row = %+v", sd)
	}
	p2 := rows["P2 52-byte string import vs no-op import"]
	if p2.Measured || len(p2.MissingWhat) != 1 || !strings.Contains(p2.MissingWhat[0], "BenchmarkKeyOf") {
		t.Errorf("P2 row without its allocation check = measured %v, missing %v", p2.Measured, p2.MissingWhat)
	}
	if n := len(unmeasured(Rows(testEnv, run))); n != len(Anchors)-3 {
		t.Errorf("%d rows unmeasured, want %d", n, len(Anchors)-3)
	}
}

// The MCP rows (issue 14): the stdio call against the API's, and the
// notification latency, whose goal is on the stdio median itself.
func TestMCPAnchorRows(t *testing.T) {
	run, err := Parse(strings.NewReader(`goos: linux
pkg: github.com/capsule-host/capsule-host/cmd/capsule-host
BenchmarkMCPToolCall/echo-2   300   0 ns/op   400 api-µs   50 api-iqr-µs   440 mcp-stdio-µs   60 mcp-stdio-iqr-µs   1.1 mcp-stdio/api
BenchmarkMCPNotifyLatency/stdio-2   50   0 ns/op   7.1 notify-ms   2.1 notify-iqr-ms   16 p90-ms
BenchmarkMCPNotifyLatency/http-2   50   0 ns/op   6.0 notify-ms   1.5 notify-iqr-ms   8 p90-ms
ok  	github.com/capsule-host/capsule-host/cmd/capsule-host	1.0s
`))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, r := range Rows(testEnv, run) {
		rows[r.Name] = r
	}
	call, notify := rows["MCP tool call over stdio vs the HTTP API"], rows["MCP output to resources/updated"]
	if !call.Measured || !call.Met || call.Ratio != 440.0/400 {
		t.Errorf("call row = measured %v met %v ratio %v", call.Measured, call.Met, call.Ratio)
	}
	if !notify.Measured || !notify.Met || notify.OursV.Value.Value != 7.1 || notify.TheirsV.Value.Value != 6.0 {
		t.Errorf("notify row = %+v", notify)
	}
}

func TestRenderAnchorTable(t *testing.T) {
	run, err := Parse(strings.NewReader(anchorOutput))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	anchorSection(&b, Rows(testEnv, run))
	doc := b.String()
	for _, want := range []string{
		"| goal | ours: median (IQR) | theirs: median (IQR) | ratio | goal | met |",
		"| CLI call vs tmux new-session -d | capsule-host call … spawn_background_process (lean client): **2.1 ms** (0.3) `BenchmarkClientVsTmux` | tmux new-session -d true: **4.0 ms** (0.5) `BenchmarkClientVsTmux` | 0.525× | < 1× | met |",
		"| CLI logs vs tmux capture-pane -p |",
		"| 2× | < 1× | **not met** |",
		"**5170 ms** (1 run) `BenchmarkShutdown/stop-500` | the same number of bwrap sandboxes alone, SIGTERM to all reaped: **1034 ms** (1 run) `BenchmarkShutdown/floor-500` | 5× | ≤ 1000 ms | **not met** |",
		"not measured: no BenchmarkKeyOf allocs/op",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("anchor table lacks %q\n--- table:\n%s", want, doc)
		}
	}
}

// Issue 15's rows: a value goal with a second condition on the slowest
// sample (met, then not met by the maximum alone), a figure with no goal,
// and an inverted ratio of per-MiB times (emulator throughput vs raw).
const terminalOutput = `pkg: github.com/capsule-host/capsule-host/registry
BenchmarkInterruptLatency-2   4   999 ns/op   0.04 exit-iqr-ms   2.2 exit-max-ms   0.33 exit-ms   0.8 prompt-iqr-ms   140 prompt-max-ms   0.83 prompt-ms
ok  	github.com/capsule-host/capsule-host/registry	1.0s
pkg: github.com/capsule-host/capsule-host/sandbox/terminal
BenchmarkSnapshot/80x24-2   1000   999 ns/op   0.11 cpu-ms/op
BenchmarkEmulatorThroughput/80x24-2   1   999 ns/op   150 emulator-iqr-ms   200 emulator-ms   0.07 raw-iqr-ms   0.5 raw-ms
ok  	github.com/capsule-host/capsule-host/sandbox/terminal	1.0s
`

func TestTerminalAnchorRows(t *testing.T) {
	run, err := Parse(strings.NewReader(terminalOutput))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, r := range Rows(testEnv, run) {
		rows[r.Name] = r
	}
	if r := rows["C-c interrupts sleep 100: send-keys to its exit"]; !r.Measured || !r.Met || r.AlsoV == nil || r.AlsoV.Value.Value != 2.2 {
		t.Errorf("exit row = %+v", r)
	}
	if r := rows["C-c interrupts sleep 100: send-keys to bash's prompt back"]; !r.Measured || r.Met {
		t.Errorf("prompt row (median met, slowest 140 ms not) = measured %v met %v", r.Measured, r.Met)
	}
	if r := rows["terminal snapshot at 80×24"]; !r.Measured || r.Met {
		t.Errorf("snapshot row = measured %v met %v; want measured, no goal to meet", r.Measured, r.Met)
	}
	if r := rows["terminal snapshot at 250×60"]; r.Measured {
		t.Errorf("250×60 snapshot row measured with no figure")
	}
	if r := rows["VT emulator throughput vs raw capture at 80×24"]; !r.Measured || r.Met || r.Ratio != 0.5/200 {
		t.Errorf("throughput row = measured %v met %v ratio %v", r.Measured, r.Met, r.Ratio)
	}
	var b strings.Builder
	anchorSection(&b, Rows(testEnv, run))
	doc := b.String()
	for _, want := range []string{
		"| C-c interrupts sleep 100: send-keys to its exit | registry SendKeys C-c, bash on a PTY, to the foreground sleep's exit (pidfd): **0.33 ms** (0.04) `BenchmarkInterruptLatency` | — |  | ≤ 100 ms; slowest ≤ 100 (2.2) | met |",
		"| ≤ 100 ms; slowest ≤ 100 (140) | **not met** |",
		"| terminal snapshot at 80×24 | Screen.Snapshot, full screen + 100 lines of scrollback, CPU: **0.11 cpu-ms** (no spread; 1000 iterations) `BenchmarkSnapshot/80x24` | — |  | none (a figure) | — |",
		"| 0.0025× | ≥ 0.3× | **not met** |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("anchor table lacks %q\n--- table:\n%s", want, doc)
		}
	}
}

package main

import (
	"fmt"
	"strconv"
	"strings"
)

// A Ref names one figure of a run: the package (relative to the module,
// "./cmd/capsule-host"), the benchmark's name without the GOMAXPROCS
// suffix, and the unit. A Bench ending in "*" matches by prefix and takes
// the last match (sub-benchmarks run in increasing N, so the largest N:
// "BenchmarkShutdown/stop-*" is stop-500 in the full run, stop-20 in the
// quick one).
type Ref struct{ Pkg, Bench, Unit string }

// A Side of an anchor row: the median and, when the benchmark reported
// one, its spread (testutil.ReportSide's "<side>-iqr-<unit>").
type AnchorSide struct {
	Label  string
	Median Ref
	Spread string // the spread's unit on the same benchmark, "" for none
}

// An Anchor is one goal of issue 16: ours against what a user would pick
// instead, measured in one run. The row's goal is on the ratio Ours /
// Theirs (Theirs / Ours with Invert, for "n× faster"), or, with no
// Theirs or with Value set, on Ours itself. Also is a second condition
// that must hold for the goal to be met (P2: no allocation on the ID
// lookup). A row with no Op has no goal: a figure an issue asks for
// (issue 15's snapshot cost), shown so it is measured in every run.
type Anchor struct {
	Name         string // the row's name: RFC.md quotes docs/bench.md by it
	Ours, Theirs AnchorSide
	Invert       bool
	Value        bool
	Op           string // "<", "≤" or "≥"; "" for a figure with no goal
	Limit        float64
	GoalUnit     string // "×" for a ratio, else Ours' unit as written
	Also         *Check
}

// A Check is a figure compared with a limit.
type Check struct {
	Label string
	Ref   Ref
	Op    string
	Limit float64
}

const (
	cmdPkg   = "./cmd/capsule-host"
	e2ePkg   = "./capsules/internal/e2e"
	localPkg = "./sandbox/local"
	regPkg   = "./registry"
	termPkg  = "./sandbox/terminal"
)

// osexecE2E is the bare os/exec side both spawn-path rows share (one
// interleaved benchmark measures it against both).
var osexecE2E = side("exec.Command(\"/bin/true\").Run()", e2ePkg, "BenchmarkSpawnPath", "osexec", "µs")

// Anchors are the rows of the anchor table, in the order.
var Anchors = []Anchor{
	{Name: "CLI call vs tmux new-session -d",
		Ours:   side("capsule-host call … spawn_background_process (lean client)", cmdPkg, "BenchmarkClientVsTmux", "lean-call", "ms"),
		Theirs: side("tmux new-session -d true", cmdPkg, "BenchmarkClientVsTmux", "tmux-new", "ms"),
		Op:     "<", Limit: 1, GoalUnit: "×"},
	{Name: "CLI logs vs tmux capture-pane -p",
		Ours:   side("capsule-host logs ID (lean client)", cmdPkg, "BenchmarkClientVsTmux", "lean-logs", "ms"),
		Theirs: side("tmux capture-pane -p", cmdPkg, "BenchmarkClientVsTmux", "tmux-capture", "ms"),
		Op:     "<", Limit: 1, GoalUnit: "×"},
	{Name: "keystroke to screen vs tmux send-keys + capture-pane",
		Ours:   side("capsule-host send ID x --screen (lean client, one exec)", cmdPkg, "BenchmarkKeystrokeCLIVsTmux", "send-screen", "ms"),
		Theirs: side("tmux send-keys -l x, then capture-pane -p", cmdPkg, "BenchmarkKeystrokeCLIVsTmux", "tmux", "ms"),
		Op:     "<", Limit: 1, GoalUnit: "×"},
	{Name: "C-c interrupts sleep 100: send-keys to its exit",
		Ours: side("registry SendKeys C-c, bash on a PTY, to the foreground sleep's exit (pidfd)", regPkg, "BenchmarkInterruptLatency", "exit", "ms"),
		Op:   "≤", Limit: 100, GoalUnit: "ms",
		Also: &Check{Label: "slowest", Ref: Ref{regPkg, "BenchmarkInterruptLatency", "exit-max-ms"}, Op: "≤", Limit: 100}},
	{Name: "C-c interrupts sleep 100: send-keys to bash's prompt back",
		Ours: side("the same C-c to the prompt in the output log (wait-for)", regPkg, "BenchmarkInterruptLatency", "prompt", "ms"),
		Op:   "≤", Limit: 100, GoalUnit: "ms",
		Also: &Check{Label: "slowest", Ref: Ref{regPkg, "BenchmarkInterruptLatency", "prompt-max-ms"}, Op: "≤", Limit: 100}},
	{Name: "terminal snapshot at 80×24",
		Ours: AnchorSide{Label: "Screen.Snapshot, full screen + 100 lines of scrollback, CPU", Median: Ref{termPkg, "BenchmarkSnapshot/80x24", "cpu-ms/op"}}},
	{Name: "terminal snapshot at 250×60",
		Ours: AnchorSide{Label: "Screen.Snapshot, full screen + 100 lines of scrollback, CPU", Median: Ref{termPkg, "BenchmarkSnapshot/250x60", "cpu-ms/op"}}},
	{Name: "VT emulator throughput vs raw capture at 80×24",
		Ours:   side("screen model (charmbracelet/x/vt), per MiB of mixed escape sequences", termPkg, "BenchmarkEmulatorThroughput/80x24", "emulator", "ms"),
		Theirs: side("the same MiB into an output log (raw capture)", termPkg, "BenchmarkEmulatorThroughput/80x24", "raw", "ms"),
		Invert: true, Op: "≥", Limit: 0.3, GoalUnit: "×"},
	{Name: "VT emulator throughput vs raw capture at 250×60",
		Ours:   side("screen model (charmbracelet/x/vt), per MiB of mixed escape sequences", termPkg, "BenchmarkEmulatorThroughput/250x60", "emulator", "ms"),
		Theirs: side("the same MiB into an output log (raw capture)", termPkg, "BenchmarkEmulatorThroughput/250x60", "raw", "ms"),
		Invert: true, Op: "≥", Limit: 0.3, GoalUnit: "×"},
	{Name: "wasm tool-call spawn of /bin/true vs os/exec",
		Ours:   side("testcap `spawn` tool call (warm pool, local backend)", e2ePkg, "BenchmarkSpawnPath", "toolcall", "µs"),
		Theirs: osexecE2E,
		Op:     "≤", Limit: 1.25, GoalUnit: "×"},
	{Name: "spawn-persistent + wait vs os/exec",
		Ours:   side("registry SpawnPersistent + Wait (keeper-backed local)", e2ePkg, "BenchmarkSpawnPath", "persistent", "µs"),
		Theirs: osexecE2E,
		Op:     "≤", Limit: 1.25, GoalUnit: "×"},
	{Name: "local backend spawn+wait vs os/exec",
		Ours:   side("sandbox/local Start + Wait (tracking cgroup)", localPkg, "BenchmarkSpawnWait/cgroup", "local", "µs"),
		Theirs: side("exec.Command(\"/bin/true\").Run()", localPkg, "BenchmarkSpawnWait/cgroup", "osexec", "µs"),
		Op:     "≤", Limit: 1.25, GoalUnit: "×"},
	{Name: "guest list_processes at 500 processes",
		Ours:   side("shell capsule list_processes (keeper-held)", cmdPkg, "BenchmarkListProcesses/guest-*", "guest", "ms"),
		Theirs: side("GET /v1/processes, same processes (no guest)", cmdPkg, "BenchmarkListProcesses/http-*", "http", "ms"),
		Value:  true, Op: "≤", Limit: 10, GoalUnit: "ms"},
	{Name: "shutdown with 500 processes",
		Ours: AnchorSide{Label: "SIGTERM of serve to exit, on_shutdown = stop", Median: Ref{cmdPkg, "BenchmarkShutdown/stop-*", "shutdown-ms"}},
		// The kernel's own share (no capsule-host): what the goal is measured against in RFC §16.
		Theirs: AnchorSide{Label: "the same number of bwrap sandboxes alone, SIGTERM to all reaped", Median: Ref{cmdPkg, "BenchmarkShutdown/floor-*", "shutdown-ms"}},
		Value:  true, Op: "≤", Limit: 1000, GoalUnit: "ms"},
	{Name: "re-adoption of 1,000 processes",
		Ours: AnchorSide{Label: "exec of a new serve (the old one kill -9ed) to its first served call", Median: Ref{cmdPkg, "BenchmarkReadopt", "first-call-ms"}},
		Op:   "≤", Limit: 1000, GoalUnit: "ms"},
	{Name: "P1 warm vs cold tool call",
		Ours:   side("warm-pool echo call", "./host", "BenchmarkWarmColdRatio", "warm", "µs"),
		Theirs: side("cold instantiate + call", "./host", "BenchmarkWarmColdRatio", "cold", "µs"),
		Invert: true, Op: "≥", Limit: 100, GoalUnit: "×"},
	{Name: "P2 52-byte string import vs no-op import",
		Ours:   side("import lifting a 52-byte string", "./host/process", "BenchmarkImportPair", "str52", "ns"),
		Theirs: side("no-op import", "./host/process", "BenchmarkImportPair", "noop", "ns"),
		Op:     "≤", Limit: 2, GoalUnit: "×",
		Also: &Check{Label: "allocs on the ID lookup (registry keyOf)", Ref: Ref{"./registry", "BenchmarkKeyOf", "allocs/op"}, Op: "≤", Limit: 0}},
	{Name: "P4 OCI start-to-exit vs runc run",
		Ours:   side("sandbox/oci Start + Wait of /bin/true", "./sandbox/oci", "BenchmarkStartToExitRatio", "oci", "ms"),
		Theirs: side("runc run on a prepared bundle", "./sandbox/oci", "BenchmarkStartToExitRatio", "runc-run", "ms"),
		Op:     "≤", Limit: 1.15, GoalUnit: "×"},
	{Name: "P6 capture vs raw pipe",
		Ours:   side("1 GiB through the local backend's capture (s per GiB)", localPkg, "BenchmarkCapture1GiB", "local", "ms"),
		Theirs: side("1 GiB read raw from an os/exec pipe", localPkg, "BenchmarkCapture1GiB", "raw", "ms"),
		Invert: true, Op: "≥", Limit: 0.5, GoalUnit: "×"},
	{Name: "wasmtime no-op warm call vs wazero",
		Ours:   side("wasmtime: no-op WAT export call", "./host/engine/wasmtime", "BenchmarkWarmCallPair", "wasmtime", "ns"),
		Theirs: side("wazero: the same call", "./host/engine/wasmtime", "BenchmarkWarmCallPair", "wazero", "ns"),
		Op:     "≤", Limit: 1, GoalUnit: "×"},
	{Name: "MCP tool call over stdio vs the HTTP API",
		Ours:   side("testcap echo over MCP stdio: `capsule-host mcp` (stdio handed to the daemon), Go SDK client", cmdPkg, "BenchmarkMCPToolCall/echo", "mcp-stdio", "µs"),
		Theirs: side("the same call, POST /v1/call (keep-alive client)", cmdPkg, "BenchmarkMCPToolCall/echo", "api", "µs"),
		Op:     "≤", Limit: 1.2, GoalUnit: "×"},
	{Name: "MCP output to resources/updated",
		Ours:   side("a printed line to the subscribed stdio client's notification", cmdPkg, "BenchmarkMCPNotifyLatency/stdio", "notify", "ms"),
		Theirs: side("the same over streamable HTTP", cmdPkg, "BenchmarkMCPNotifyLatency/http", "notify", "ms"),
		Value:  true, Op: "≤", Limit: 20, GoalUnit: "ms"},
	{Name: "memory per live process vs tmux",
		Ours:   AnchorSide{Label: "daemon + keeper, KiB RSS per process", Median: Ref{cmdPkg, "BenchmarkScale/capsule-host-*", "KiB-rss/proc"}},
		Theirs: AnchorSide{Label: "tmux server, KiB RSS per session", Median: Ref{cmdPkg, "BenchmarkScale/tmux-*", "KiB-rss/proc"}},
		Op:     "≤", Limit: 4, GoalUnit: "×"},
	{Name: "fds per live process vs tmux",
		Ours:   AnchorSide{Label: "daemon + keeper, fds per process", Median: Ref{cmdPkg, "BenchmarkScale/capsule-host-*", "fds/proc"}},
		Theirs: AnchorSide{Label: "tmux server, fds per session", Median: Ref{cmdPkg, "BenchmarkScale/tmux-*", "fds/proc"}},
		Op:     "≤", Limit: 1.5, GoalUnit: "×"},
	{Name: "threads per live process vs tmux",
		Ours:   AnchorSide{Label: "daemon + keeper, threads per process", Median: Ref{cmdPkg, "BenchmarkScale/capsule-host-*", "threads/proc"}},
		Theirs: AnchorSide{Label: "tmux server, threads per session", Median: Ref{cmdPkg, "BenchmarkScale/tmux-*", "threads/proc"}},
		Value:  true, Op: "≤", Limit: 0.05, GoalUnit: "threads/proc"},
}

// side is a AnchorSide reported by testutil.ReportSide: "<name>-<unit>" and
// "<name>-iqr-<unit>" on one benchmark.
func side(label, pkg, bench, name, unit string) AnchorSide {
	return AnchorSide{Label: label, Median: Ref{pkg, bench, name + "-" + unit}, Spread: name + "-iqr-" + unit}
}

// A Row is an anchor with its figures found in a run.
type Row struct {
	Anchor
	OursV, TheirsV *Fig
	Ratio          float64 // 0 when not computable
	Met, Measured  bool
	AlsoV          *Fig
	MissingWhat    []string
}

// A Fig is one figure found: its value, its spread (nil when none), the
// benchmark it came from and how many iterations that ran.
type Fig struct {
	Value  Metric
	Spread *Metric
	Bench  string
	N      int64
}

// find looks ref up in run; see Ref for the "*" suffix.
func find(env Env, run Run, ref Ref, spread string) *Fig {
	var got *Fig
	for _, p := range run.Packages {
		if pkgName(env, p) != ref.Pkg {
			continue
		}
		for _, r := range p.Results {
			if !benchMatch(ref.Bench, r.Name) {
				continue
			}
			for _, m := range r.Metrics {
				if m.Unit != ref.Unit {
					continue
				}
				f := &Fig{Value: m, Bench: r.Name, N: r.N}
				for _, s := range r.Metrics {
					if spread != "" && s.Unit == spread {
						f.Spread = &s
					}
				}
				got = f
			}
		}
	}
	return got
}

// benchMatch matches name against pattern, whose "*" suffix stands for
// the digits of an N ("stop-*" is stop-500, never stop-each-500).
func benchMatch(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		n, ok := strings.CutPrefix(name, p)
		_, err := strconv.Atoi(n)
		return ok && err == nil
	}
	return pattern == name
}

// sameN pins theirs to the N ours was found at when both patterns take
// an N, so a row compares the two sides at one N (tmux-5000 may be
// skipped while capsule-host-5000 ran).
func sameN(ours, theirs Ref, found *Fig) Ref {
	op, ok1 := strings.CutSuffix(ours.Bench, "*")
	tp, ok2 := strings.CutSuffix(theirs.Bench, "*")
	if ok1 && ok2 && found != nil {
		theirs.Bench = tp + strings.TrimPrefix(found.Bench, op)
	}
	return theirs
}

// Rows evaluates every anchor against run.
func Rows(env Env, run Run) []Row {
	var rows []Row
	for _, a := range Anchors {
		r := Row{Anchor: a}
		r.OursV = find(env, run, a.Ours.Median, a.Ours.Spread)
		if r.OursV == nil {
			r.MissingWhat = append(r.MissingWhat, a.Ours.Median.Bench+" "+a.Ours.Median.Unit)
		}
		if a.Theirs.Median.Bench != "" {
			r.TheirsV = find(env, run, sameN(a.Ours.Median, a.Theirs.Median, r.OursV), a.Theirs.Spread)
			if t := find(env, run, a.Theirs.Median, a.Theirs.Spread); r.TheirsV == nil && t != nil {
				// Theirs stopped at a smaller N: compare there.
				r.TheirsV = t
				r.OursV = find(env, run, sameN(a.Theirs.Median, a.Ours.Median, t), a.Ours.Spread)
			}
			if r.TheirsV == nil {
				r.MissingWhat = append(r.MissingWhat, a.Theirs.Median.Bench+" "+a.Theirs.Median.Unit)
			}
		}
		if r.OursV != nil && r.TheirsV != nil {
			num, den := r.OursV.Value.Value, r.TheirsV.Value.Value
			if a.Invert {
				num, den = den, num
			}
			if den != 0 {
				r.Ratio = num / den
			}
		}
		if a.Also != nil {
			r.AlsoV = find(env, run, a.Also.Ref, "")
			if r.AlsoV == nil {
				r.MissingWhat = append(r.MissingWhat, a.Also.Ref.Bench+" "+a.Also.Ref.Unit)
			}
		}
		r.Measured = len(r.MissingWhat) == 0
		if r.Measured {
			v := r.Ratio
			if a.Value || a.Theirs.Median.Bench == "" {
				v = r.OursV.Value.Value
			}
			r.Met = compare(v, a.Op, a.Limit) && (a.Also == nil || compare(r.AlsoV.Value.Value, a.Also.Op, a.Also.Limit))
		}
		rows = append(rows, r)
	}
	return rows
}

func compare(v float64, op string, limit float64) bool {
	switch op {
	case "<":
		return v < limit
	case "≤":
		return v <= limit
	case "≥":
		return v >= limit
	}
	return false
}

// anchorSection writes the anchor table: one row per goal, each side's
// median and spread, the ratio, the goal and whether it is met.
func anchorSection(b *strings.Builder, rows []Row) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Anchor table (issues 15 and 16)\n\n")
	b.WriteString("One row per goal: ours against what a user would pick instead, both sides measured in the same run\n")
	b.WriteString("(interleaved where the row's benchmark takes both: one sample of each side in turn), or ours against\n")
	b.WriteString("a limit; a row without a goal is a figure an issue asks for. Median, with the interquartile range\n")
	b.WriteString("(IQR) where the benchmark took several samples; the ratio is of the medians.\n\n")
	b.WriteString("| goal | ours: median (IQR) | theirs: median (IQR) | ratio | goal | met |\n|---|---|---|---:|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", cell(r.Name), figCell(r.Ours, r.OursV), figCell(r.Theirs, r.TheirsV),
			ratioCell(r), goalCell(r), metCell(r))
	}
	b.WriteString("\n")
}

func figCell(s AnchorSide, f *Fig) string {
	if s.Median.Bench == "" {
		return "—"
	}
	if f == nil {
		return cell(s.Label) + ": not measured"
	}
	unit := strings.TrimSuffix(unitSuffix(s.Median.Unit), "/op")
	v := cell(s.Label) + ": **" + f.Value.Text + " " + unit + "**"
	switch {
	case f.Spread != nil:
		v += " (" + f.Spread.Text + ")"
	case f.N > 1:
		v += fmt.Sprintf(" (no spread; %d iterations)", f.N)
	default:
		v += " (1 run)"
	}
	return v + " `" + cell(f.Bench) + "`"
}

// unitSuffix is the unit part of a side's metric ("lean-call-ms" → "ms").
func unitSuffix(u string) string {
	for _, s := range []string{"ms", "µs", "ns"} {
		if strings.HasSuffix(u, "-"+s) {
			return s
		}
	}
	return u
}

func ratioCell(r Row) string {
	if r.Ratio == 0 {
		return ""
	}
	return strconv.FormatFloat(r.Ratio, 'g', 3, 64) + "×"
}

func goalCell(r Row) string {
	if r.Op == "" {
		return "none (a figure)"
	}
	g := fmt.Sprintf("%s %s%s", r.Op, strconv.FormatFloat(r.Limit, 'g', -1, 64), r.GoalUnit)
	if r.GoalUnit != "×" {
		g = fmt.Sprintf("%s %s %s", r.Op, strconv.FormatFloat(r.Limit, 'g', -1, 64), r.GoalUnit)
	}
	if r.Also != nil {
		g += fmt.Sprintf("; %s %s %g", r.Also.Label, r.Also.Op, r.Also.Limit)
		if r.AlsoV != nil {
			g += " (" + r.AlsoV.Value.Text + ")"
		}
	}
	return cell(g)
}

func metCell(r Row) string {
	switch {
	case !r.Measured:
		return "not measured: no " + cell(strings.Join(r.MissingWhat, ", "))
	case r.Op == "":
		return "—"
	case r.Met:
		return "met"
	default:
		return "**not met**"
	}
}

package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// realOutput is verbatim output of
//
//	go test -run '^$' -bench . -benchtime 3x ./sandbox/local/ ./registry/
//
// on the 2-core development machine (tabs, padding and the trailing
// spaces of the cpu line included).
const realOutput = `goos: linux
goarch: amd64
pkg: github.com/capsule-host/capsule-host/sandbox/local
cpu: Oxide Virtual Turin-like Processor             
BenchmarkSpawnWait/cgroup-2         	       3	   7491352 ns/op	      4125 local-µs/op	         1.232 local/osexec	      3350 osexec-µs/op	         1.169 p50-local/osexec	      3048 p50-osexec-µs	      1182 p50-start-µs
BenchmarkSpawnWait/nocgroup-2       	       3	  21860953 ns/op	     13938 local-µs/op	         1.776 local/osexec	      7849 osexec-µs/op	         1.641 p50-local/osexec	      8173 p50-osexec-µs	      2500 p50-start-µs
BenchmarkCapture1GiB-2              	       3	2812344624 ns/op	 381.80 MB/s	       737.3 local-MiB/s	         1.017 local/raw	       724.7 raw-MiB/s
PASS
ok  	github.com/capsule-host/capsule-host/sandbox/local	11.650s
goos: linux
goarch: amd64
pkg: github.com/capsule-host/capsule-host/registry
cpu: Oxide Virtual Turin-like Processor             
BenchmarkStatus-2                	       3	    995421 ns/op
BenchmarkAttachStatus-2          	       3	     12177 ns/op
BenchmarkStatusNoSuchProcess-2   	       3	      2482 ns/op
BenchmarkStatusForeign-2         	       3	      2140 ns/op
BenchmarkReadSince64K-2          	       3	    207083 ns/op	 316.47 MB/s
BenchmarkReadFromRaw64K-2        	       3	      9288 ns/op	7056.24 MB/s
BenchmarkReadSinceVsRaw-2        	       3	    493943 ns/op	         0.8659 ratio	       286.2 raw-MB/s	       247.8 readsince-MB/s
PASS
ok  	github.com/capsule-host/capsule-host/registry	0.346s
`

var testEnv = Env{
	Date:       "2026-01-02 03:04 UTC",
	GoVersion:  "go version go1.26.8 linux/amd64",
	CPUModel:   "AMD EPYC",
	CPUs:       2,
	LoadBefore: "3.30 2.78 1.54",
	LoadAfter:  "3.16 2.77 1.56",
	Command:    "make bench BENCHTIME=3x",
	Benchtime:  "3x",
	Module:     "github.com/capsule-host/capsule-host",
}

func TestParseRealOutput(t *testing.T) {
	run, err := Parse(strings.NewReader(realOutput))
	if err != nil {
		t.Fatal(err)
	}
	if run.GOOS != "linux" || run.GOARCH != "amd64" {
		t.Errorf("goos/goarch = %q/%q", run.GOOS, run.GOARCH)
	}
	if len(run.Packages) != 2 {
		t.Fatalf("%d packages, want 2: %+v", len(run.Packages), run.Packages)
	}
	local, reg := run.Packages[0], run.Packages[1]
	if local.Path != "github.com/capsule-host/capsule-host/sandbox/local" || local.Status != "ok" || local.Elapsed != "11.650s" {
		t.Errorf("local package = %q %q %q", local.Path, local.Status, local.Elapsed)
	}
	if local.CPU != "Oxide Virtual Turin-like Processor" {
		t.Errorf("cpu = %q", local.CPU)
	}
	if len(local.Results) != 3 || len(reg.Results) != 7 {
		t.Fatalf("results: %d local, %d registry; want 3 and 7", len(local.Results), len(reg.Results))
	}
	sw := local.Results[0]
	if sw.Name != "BenchmarkSpawnWait/cgroup" || sw.Procs != 2 || sw.N != 3 || len(sw.Metrics) != 7 {
		t.Errorf("first result = %+v", sw)
	}
	if m := sw.Metrics[2]; m.Unit != "local/osexec" || m.Value != 1.232 || m.Text != "1.232" {
		t.Errorf("custom metric = %+v", m)
	}
	if m := sw.Metrics[1]; m.Unit != "local-µs/op" || m.Text != "4125" {
		t.Errorf("non-ASCII unit = %+v", m)
	}
	if reg.Path != "github.com/capsule-host/capsule-host/registry" || reg.Status != "ok" {
		t.Errorf("registry package = %q %q", reg.Path, reg.Status)
	}
}

func TestRenderRealOutput(t *testing.T) {
	run, err := Parse(strings.NewReader(realOutput))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Render(&b, testEnv, run); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, want := range []string{
		"**Quick-mode sample** (`-benchtime 3x`)",
		"| date | 2026-01-02 03:04 UTC |",
		"| command | `make bench BENCHTIME=3x` |",
		"| go | go version go1.26.8 linux/amd64 |",
		"| cpu (/proc/cpuinfo) | AMD EPYC, 2 logical CPUs |",
		"| cpu (go test) | Oxide Virtual Turin-like Processor |",
		"| load average before | 3.30 2.78 1.54 |",
		"| load average after | 3.16 2.77 1.56 |",
		"## ./sandbox/local\n\nok 11.650s\n",
		"| benchmark | procs | iterations | ns/op | MB/s | local-µs/op | local/osexec | osexec-µs/op | p50-local/osexec | p50-osexec-µs | p50-start-µs | local-MiB/s | local/raw | raw-MiB/s |\n" +
			"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
			"| BenchmarkSpawnWait/cgroup | 2 | 3 | 7491352 |  | 4125 | 1.232 | 3350 | 1.169 | 3048 | 1182 |  |  |  |\n",
		"| BenchmarkCapture1GiB | 2 | 3 | 2812344624 | 381.80 |  |  |  |  |  |  | 737.3 | 1.017 | 724.7 |\n",
		"## ./registry\n\nok 0.346s\n",
		"| benchmark | procs | iterations | ns/op | MB/s | ratio | raw-MB/s | readsince-MB/s |\n",
		"| BenchmarkStatusNoSuchProcess | 2 | 3 | 2482 |  |  |  |  |\n",
		"| BenchmarkReadSinceVsRaw | 2 | 3 | 493943 |  | 0.8659 | 286.2 | 247.8 |\n",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q\n--- document:\n%s", want, doc)
		}
	}
}

// A load average above the CPU count at either end marks the document
// as measured on a loaded machine; one at or below it does not.
func TestRenderMarksALoadedMachine(t *testing.T) {
	for _, tc := range []struct {
		before, after string
		loaded        bool
	}{
		{"3.30 2.78 1.54", "1.0 1.0 1.0", true},
		{"1.50 2.78 1.54", "12.25 9 9", true},
		{"2.00 9.00 9.00", "1.99 9 9", false},
		{"", "", false},
	} {
		env := testEnv
		env.LoadBefore, env.LoadAfter = tc.before, tc.after
		var b bytes.Buffer
		if err := Render(&b, env, Run{}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "**Loaded machine**"); got != tc.loaded {
			t.Errorf("load %q/%q: marked loaded %v, want %v\n%s", tc.before, tc.after, got, tc.loaded, b.String())
		}
	}
}

// TestParseEdges covers what a longer run prints: a name whose figures
// come on a later line (the benchmark wrote output), a skipped benchmark,
// packages without benchmarks, a failed package, noise.
func TestParseEdges(t *testing.T) {
	const out = "?   \tgithub.com/x/m/nobench\t[no test files]\n" +
		"ok  \tgithub.com/x/m/quiet\t0.004s [no tests to run]\n" +
		"goos: linux\n" +
		"pkg: github.com/x/m/a\n" +
		"BenchmarkChatty-4   \tsome output the benchmark printed\n" +
		"       10\t  123.5 ns/op\t  16 B/op\t  1 allocs/op\n" +
		"--- SKIP: BenchmarkNeedsRoot\n" +
		"    a_test.go:9: needs root\n" +
		"BenchmarkPlain \t 5\t 7 ns/op\n" +
		"not a result 1 2\n" +
		"PASS\n" +
		"ok  \tgithub.com/x/m/a\t1.5s\n" +
		"# github.com/x/m/b\n" +
		"b.go:3:1: syntax error\n" +
		"FAIL\tgithub.com/x/m/b [build failed]\n" +
		"FAIL\n"
	run, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range run.Packages {
		got = append(got, p.Path+" "+p.Status)
	}
	want := []string{"github.com/x/m/quiet ok", "github.com/x/m/a ok", "github.com/x/m/b FAIL"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("packages = %v, want %v", got, want)
	}
	a := run.Packages[1]
	if len(a.Results) != 2 || a.Results[0].Name != "BenchmarkChatty" || a.Results[0].Procs != 4 || a.Results[0].N != 10 || len(a.Results[0].Metrics) != 3 {
		t.Fatalf("results = %+v", a.Results)
	}
	if r := a.Results[1]; r.Name != "BenchmarkPlain" || r.Procs != 0 || r.Metrics[0].Text != "7" {
		t.Errorf("plain result = %+v", r)
	}
	if len(a.Skipped) != 1 || a.Skipped[0] != "BenchmarkNeedsRoot" {
		t.Errorf("skipped = %v", a.Skipped)
	}
	var b bytes.Buffer
	if err := Render(&b, Env{Module: "github.com/x/m", Benchtime: "2s"}, run); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, want := range []string{"Packages that ran with no benchmarks: `./quiet` (ok 0.004s [no tests to run]).", "## ./b\n\nFAIL [build failed]\n", "Skipped: BenchmarkNeedsRoot.", "| BenchmarkChatty | 4 | 10 | 123.5 | 16 | 1 |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q\n--- document:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "Quick-mode") {
		t.Error("a 2s run is marked quick")
	}
}

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"BenchmarkX-2\t3\t100 ns/op", true},
		{"BenchmarkX-2 3 100 ns/op 1.5 ratio", true},
		{"BenchmarkX-2 3 100", false},            // value without unit
		{"BenchmarkX-2 0 100 ns/op", false},      // no iterations
		{"BenchmarkX-2 3 100 ns/op 5 6", false},  // a number as unit
		{"BenchmarkX-2 3 abc ns/op", false},      // not a number
		{"TestX 3 100 ns/op", false},             // not a benchmark
		{"BenchmarkX-2 3 100 BenchmarkY", false}, // a name as unit
	} {
		if _, ok := ParseLine(tc.line); ok != tc.ok {
			t.Errorf("ParseLine(%q) ok = %v, want %v", tc.line, ok, tc.ok)
		}
	}
	if n, p := splitProcs("BenchmarkX/sub-case-16"); n != "BenchmarkX/sub-case" || p != 16 {
		t.Errorf("splitProcs = %q %d", n, p)
	}
	if n, p := splitProcs("BenchmarkX/n-01"); n != "BenchmarkX/n-01" || p != 0 {
		t.Errorf("splitProcs of a non-canonical number = %q %d", n, p)
	}
}

func TestParseCPUInfo(t *testing.T) {
	model, n := parseCPUInfo([]byte("processor\t: 0\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\nmodel name\t: AMD EPYC\n"))
	if model != "AMD EPYC" || n != 2 {
		t.Errorf("parseCPUInfo = %q %d", model, n)
	}
}

// FuzzParseLine: the line parser never panics, and what it accepts it
// reads back identically from its own canonical rendering.
func FuzzParseLine(f *testing.F) {
	for _, l := range strings.Split(realOutput, "\n") {
		f.Add(l)
	}
	f.Add("BenchmarkX-2\t3\t100 ns/op\t5 B/op\t1 allocs/op\t2.5 x")
	f.Add("Benchmark-1 1 1 a")
	f.Fuzz(func(t *testing.T, line string) {
		r, ok := ParseLine(line)
		if !ok {
			return
		}
		if r.N <= 0 || len(r.Metrics) == 0 || !strings.HasPrefix(r.Name, "Benchmark") {
			t.Fatalf("accepted %q as %+v", line, r)
		}
		name := r.Name
		if r.Procs > 0 {
			name += "-" + itoa(r.Procs)
		}
		parts := []string{name, itoa64(r.N)}
		for _, m := range r.Metrics {
			parts = append(parts, m.Text, m.Unit)
		}
		again, ok := ParseLine(strings.Join(parts, "\t"))
		if !ok || again.Name != r.Name || again.Procs != r.Procs || again.N != r.N || len(again.Metrics) != len(r.Metrics) {
			t.Fatalf("%q: re-parse of the canonical form gave %+v (ok %v), first %+v", line, again, ok, r)
		}
		for i := range r.Metrics {
			if again.Metrics[i].Text != r.Metrics[i].Text || again.Metrics[i].Unit != r.Metrics[i].Unit {
				t.Fatalf("%q: metric %d changed: %+v vs %+v", line, i, again.Metrics[i], r.Metrics[i])
			}
		}
	})
}

func itoa(n int) string     { return itoa64(int64(n)) }
func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

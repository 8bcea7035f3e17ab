package main

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// Metric is one "value unit" pair of a benchmark line. Text is the value
// exactly as go test printed it, so the document never reformats a figure.
type Metric struct {
	Unit  string
	Value float64
	Text  string
}

// Result is one parsed benchmark line.
type Result struct {
	Name    string // without the "-N" GOMAXPROCS suffix
	Procs   int    // the suffix, 0 when there was none
	N       int64  // iterations
	Metrics []Metric
}

// Package is the output of one test binary: its benchmarks, in order, and
// the verdict of its ok/FAIL line.
type Package struct {
	Path    string
	CPU     string // the "cpu:" line go test printed, if any
	Results []Result
	Skipped []string // benchmarks that reported "--- SKIP"
	Status  string   // "ok", "FAIL" or "" (no verdict line seen)
	Elapsed string   // as printed on the verdict line
}

// Run is everything read from one go test output.
type Run struct {
	GOOS, GOARCH string
	Packages     []*Package
}

// ParseLine parses one benchmark result line in the standard format:
//
//	BenchmarkName-P  <iterations>  <value> <unit>  [<value> <unit>]...
//
// Units are whatever the benchmark reported (ns/op, B/op, allocs/op, MB/s
// or a b.ReportMetric unit such as "ratio"). It reports false for
// anything else, so callers can skip the noise a benchmark may print.
func ParseLine(line string) (Result, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
		return Result{}, false
	}
	r, ok := parseResults(f[1:])
	if !ok {
		return Result{}, false
	}
	r.Name, r.Procs = splitProcs(f[0])
	return r, true
}

// parseResults parses "<iterations> (<value> <unit>)+" fields: the part of
// a result line after the name, which go test prints on a line of its own
// when the benchmark wrote output after its name.
func parseResults(f []string) (Result, bool) {
	if len(f) < 3 || len(f)%2 != 1 {
		return Result{}, false
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n <= 0 {
		return Result{}, false
	}
	r := Result{N: n}
	for i := 1; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil || !validUnit(f[i+1]) {
			return Result{}, false
		}
		r.Metrics = append(r.Metrics, Metric{Unit: f[i+1], Value: v, Text: f[i]})
	}
	return r, true
}

// validUnit refuses a "unit" that is really a number or a name: go test
// units never start with a digit, a sign or a dot.
func validUnit(u string) bool {
	c := u[0]
	return !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.') && !strings.HasPrefix(u, "Benchmark")
}

// splitProcs separates the "-N" suffix go test appends when GOMAXPROCS > 1.
func splitProcs(name string) (string, int) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return name, 0
	}
	p, err := strconv.Atoi(name[i+1:])
	if err != nil || p <= 0 || strconv.Itoa(p) != name[i+1:] {
		return name, 0
	}
	return name[:i], p
}

// parseVerdict recognises a package's verdict line, "ok  <pkg>  <time>"
// or "FAIL  <pkg>  <time or reason>", and returns its fields.
func parseVerdict(line string) (status, pkg, elapsed string, ok bool) {
	f := strings.Fields(line)
	if len(f) < 2 || (f[0] != "ok" && f[0] != "FAIL") {
		return "", "", "", false
	}
	if len(f) >= 3 {
		elapsed = strings.Join(f[2:], " ") // "1.5s", "0.01s [no tests to run]", "[build failed]"
	}
	return f[0], f[1], elapsed, true
}

// parser carries the state between lines: the package being read and a
// benchmark name whose results have not appeared yet.
type parser struct {
	run     Run
	cur     *Package
	pending string // a "BenchmarkX-2" line whose figures come later
}

func (p *parser) pkg() *Package {
	if p.cur == nil {
		p.cur = &Package{}
		p.run.Packages = append(p.run.Packages, p.cur)
	}
	return p.cur
}

// line consumes one line of go test output.
func (p *parser) line(s string) {
	t := strings.TrimSpace(s)
	if k, v, ok := strings.Cut(t, ": "); ok && (k == "goos" || k == "goarch" || k == "pkg" || k == "cpu") {
		p.header(k, strings.TrimSpace(v))
		return
	}
	if r, ok := ParseLine(t); ok {
		p.pending = ""
		p.pkg().Results = append(p.pkg().Results, r)
		return
	}
	if r, ok := parseResults(strings.Fields(t)); ok && p.pending != "" {
		r.Name, r.Procs = splitProcs(p.pending)
		p.pending = ""
		p.pkg().Results = append(p.pkg().Results, r)
		return
	}
	if f := strings.Fields(t); len(f) >= 1 && strings.HasPrefix(f[0], "Benchmark") {
		p.pending = f[0]
		return
	}
	if name, ok := strings.CutPrefix(t, "--- SKIP: "); ok && strings.HasPrefix(name, "Benchmark") {
		name, _, _ = strings.Cut(name, " ")
		n, _ := splitProcs(name)
		p.pkg().Skipped = append(p.pkg().Skipped, n)
		return
	}
	if status, path, elapsed, ok := parseVerdict(t); ok {
		p.verdict(status, path, elapsed)
	}
}

func (p *parser) header(k, v string) {
	switch k {
	case "goos":
		p.run.GOOS = v
	case "goarch":
		p.run.GOARCH = v
	case "pkg":
		if p.cur != nil && p.cur.Path != v {
			p.cur = nil
		}
		p.pkg().Path = v
	case "cpu":
		p.pkg().CPU = v
	}
}

// verdict closes the current package. A verdict for a package that
// printed no header (no benchmarks, or a build failure) starts and closes
// a package of its own.
func (p *parser) verdict(status, path, elapsed string) {
	if p.cur != nil && p.cur.Path != "" && p.cur.Path != path {
		p.cur = nil
	}
	pk := p.pkg()
	pk.Path, pk.Status, pk.Elapsed = path, status, elapsed
	p.cur, p.pending = nil, ""
}

// Parse reads go test -bench output. Lines it cannot parse are ignored.
func Parse(r io.Reader) (Run, error) {
	var p parser
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		p.line(sc.Text())
	}
	return p.run, sc.Err()
}

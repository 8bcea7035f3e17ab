// Command benchdoc turns `go test -bench` output into docs/bench.md, the
// one place benchmark figures live (RFC.md quotes its rows by name):
//
//	go test -run '^$' -bench . ./... | tee docs/bench.raw.txt |
//	    benchdoc -benchtime 2s -cmd "make bench" -o docs/bench.md
//
// It reads the standard format on stdin (name, iterations, then value/unit
// pairs: ns/op, B/op, allocs/op, MB/s and any b.ReportMetric unit) and
// writes a header (date, `go version`, CPU model and count from
// /proc/cpuinfo, /proc/loadavg when it started and when its input ended)
// the scale curves (sub-benchmarks named side-N: a PNG drawn with
// gonum/plot beside the document and a table of medians and ratios), and
// one table per package. Lines it cannot parse are ignored, except
// the packages' ok/FAIL verdict lines. Run it in the same pipeline as the
// benchmarks so that "before" and "after" bracket them.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	out := flag.String("o", "", "output file (default: standard output)")
	benchtime := flag.String("benchtime", "", "the -benchtime the benchmarks ran with (\"3x\" marks a quick-mode sample)")
	cmd := flag.String("cmd", "", "the command that produced the input, for the header")
	goTool := flag.String("go", "go", "the go command whose version the header reports")
	plots := flag.Bool("plots", true, "draw each scale curve as a PNG beside the -o file (ignored without -o)")
	require := flag.Bool("require-anchors", false, "fail when a row of the anchor table has no figures (make test's quick run: it checks that every anchor benchmark still runs, never a timing)")
	flag.Parse()

	env := Env{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		LoadBefore: loadAvg(),
		Command:    *cmd,
		Benchtime:  *benchtime,
		Module:     modulePath("go.mod"),
		GoVersion:  goVersion(*goTool),
		Plots:      *plots && *out != "",
	}
	env.CPUModel, env.CPUs = cpuInfo("/proc/cpuinfo")
	run, err := Parse(os.Stdin)
	env.LoadAfter = loadAvg()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc: reading the benchmark output:", err)
		os.Exit(1)
	}
	if env.Plots {
		for _, c := range Curves(run) {
			if err := drawCurve(filepath.Dir(*out), c); err != nil {
				fmt.Fprintln(os.Stderr, "benchdoc: plotting", c.Bench, c.Unit+":", err)
				os.Exit(1)
			}
		}
	}
	var buf bytes.Buffer
	if err := Render(&buf, env, run); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
	if err := write(*out, buf.Bytes()); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
	if *require {
		if missing := unmeasured(Rows(env, run)); len(missing) > 0 {
			fmt.Fprintln(os.Stderr, "benchdoc: anchor rows without figures:\n  "+strings.Join(missing, "\n  "))
			os.Exit(1)
		}
	}
}

// unmeasured names the anchor rows that lack a figure, with what is missing.
func unmeasured(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if !r.Measured {
			out = append(out, r.Name+": no "+strings.Join(r.MissingWhat, ", "))
		}
	}
	return out
}

// write replaces path atomically (temp file + rename), so an interrupted
// run never leaves half a document; "" is standard output.
func write(path string, b []byte) error {
	if path == "" {
		_, err := os.Stdout.Write(b)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bench-*.md")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// loadAvg is the 1, 5 and 15 minute load average, or "" off Linux.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cpuInfo returns the first "model name" and the number of "processor"
// entries (logical CPUs) of a /proc/cpuinfo file.
func cpuInfo(path string) (model string, cpus int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0
	}
	return parseCPUInfo(b)
}

func parseCPUInfo(b []byte) (model string, cpus int) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "processor":
			cpus++
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		}
	}
	return model, cpus
}

// goVersion is `go version`, falling back to the toolchain benchdoc was
// built with when the go command cannot be run.
func goVersion(tool string) string {
	b, err := exec.Command(tool, "version").Output()
	if err != nil {
		return runtime.Version() + " (benchdoc's own toolchain; `go version` failed)"
	}
	return strings.TrimSpace(string(b))
}

// modulePath reads the module line of a go.mod, so tables can name
// packages relative to the module; "" when there is none.
func modulePath(gomod string) string {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}
